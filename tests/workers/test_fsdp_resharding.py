"""After a no-grad pass (log-probs, reference log-probs, values) every FSDP2 unit is sharded again.

The root unit keeps its weights gathered from forward to backward (apply_fsdp2), and a no-grad forward has no
backward: before the fix, one log-prob micro-batch on a CPU rank, and any number of them on a GPU, left the root's
embeddings and LM head unsharded, so ``named_parameters()`` showed plain tensors (the gpu tests' ``full_tensor()``
failed on them) and every rank held the full root weights until the next backward, the reference policy's for the
whole run. Runs on one and on two gloo ranks, with one micro-batch and with several per pass.
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu.ranks import BASE_OVERRIDES, actor_worker, join_one_rank, leave
from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import save_tiny_model_dir
from tests.trainer.config.test_key_effects import typed
from tests.workers.test_lora_workers import ARR, _batch, _train_batch

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny_reshard_model"))


def _plain_tensors(module: torch.nn.Module) -> list[str]:
    """Parameters that are not DTensor shards: FSDP2 left their unit gathered."""
    from torch.distributed.tensor import DTensor

    return [name for name, param in module.named_parameters() if not isinstance(param, DTensor)]


def _scenario(rank: int, port: int, world: int, model_dir: str, micro: int, results) -> None:
    import os

    import torch.distributed as dist

    from verl.workers import fsdp_workers

    if world == 1:
        join_one_rank(port)
    else:
        torch.set_num_threads(1)
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
        fsdp_workers.measure_matmul_peak = lambda device, dtype: 1e12
    try:
        sizes = (f"{ARR}.rollout.log_prob_micro_batch_size_per_gpu={micro}",
                 f"{ARR}.ref.log_prob_micro_batch_size_per_gpu={micro}",
                 f"critic.forward_micro_batch_size_per_gpu={micro}", "critic.ppo_micro_batch_size_per_gpu=2",
                 "critic.ppo_mini_batch_size=2", "algorithm.adv_estimator=gae")
        worker = actor_worker(model_dir, *sizes)
        out = {"fresh": _plain_tensors(worker.actor_module)}
        data = _batch()
        rows = len(data) // world
        data = data[rank * rows : (rank + 1) * rows]  # this rank's shard, as DP_COMPUTE_PROTO hands it over
        log_probs = worker.compute_log_prob(data).batch["old_log_probs"]
        out["after_log_prob"] = _plain_tensors(worker.actor_module)
        worker.compute_ref_log_prob(data)
        out["ref_after_ref_log_prob"] = _plain_tensors(worker.ref_module)
        train = _train_batch(worker, data)
        worker.update_actor(train)
        out["after_update"] = _plain_tensors(worker.actor_module)
        out["log_probs"] = log_probs.clone()

        config = typed(f"{ARR}.model.path={model_dir}", f"critic.model.path={model_dir}", *BASE_OVERRIDES, *sizes)
        critic = fsdp_workers.CriticWorker(config.critic)
        critic.init_model()
        critic.compute_values(data)
        out["critic_after_values"] = _plain_tensors(critic.critic_module)
        results[rank] = out
    finally:
        leave()


@pytest.mark.parametrize("world, micro", [(1, 8), (1, 2), (2, 4)], ids=["1rank-1micro", "1rank-4micro", "2ranks"])
def test_no_grad_passes_leave_every_unit_sharded(model_dir, world, micro):
    results = run_ranks(_scenario, free_port(), world, model_dir, micro, nprocs=world, timeout_s=220)
    for rank in range(world):
        out = results[rank]
        assert out["fresh"] == []  # FSDP2 shards every parameter at wrapping
        assert out["after_log_prob"] == [], out["after_log_prob"]
        assert out["ref_after_ref_log_prob"] == [], out["ref_after_ref_log_prob"]
        assert out["after_update"] == []
        assert out["critic_after_values"] == [], out["critic_after_values"]
        assert torch.isfinite(out["log_probs"]).all()



def _peft_generate_first(rank: int, port: int, results) -> None:
    from tests.helpers.tiny_model import tiny_llama
    from verl.models.lora import add_lora
    from verl.workers.config import FSDPEngineConfig
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh, unsharded

    join_one_rank(port)
    try:
        model = add_lora(tiny_llama(), rank=4, alpha=8, target_modules="all-linear")
        module = apply_fsdp2(model, FSDPEngineConfig(), create_device_mesh(1))
        state = module._get_fsdp_state()  # torch 2.11 and 2.13: the private state FSDP2 crowns as root
        ids = torch.tensor([[5, 6, 7]])
        with torch.no_grad(), unsharded(module):  # as the HF rollout's sharding manager gathers the weights
            generated = module.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=2,
                                        do_sample=False, pad_token_id=0)
        loss = module(input_ids=generated, labels=generated).loss  # a training forward through the root
        loss.backward()
        results[rank] = {"root": state._is_root, "tokens": tuple(generated.shape), "finite": bool(torch.isfinite(loss))}
    finally:
        leave()


def test_a_peft_model_generates_before_training_under_fsdp2():
    """HF generate on a peft model runs the wrapped model's forward, not the root unit's; apply_fsdp2 makes the root
    settle at wrapping, so a training forward afterwards works (before: 'FSDP requires running forward through the
    root module first')."""
    out = run_ranks(_peft_generate_first, free_port(), nprocs=1, timeout_s=200)[0]
    assert out == {"root": True, "tokens": (1, 5), "finite": True}
