"""fsdp_config.fsdp_size in RL (HSDP) on 2 gloo ranks with a tiny Llama: fsdp_size=1 builds a (ddp=2, fsdp=1) mesh,
every weight is replicated over the ddp axis, and one actor update lands on the same weights as sharding over both
ranks (fsdp_size=-1); a checkpoint saved under HSDP resumes to the same log-probs. Each rank computes its half of
the batch, as the trainer's DP dispatch gives it."""

from __future__ import annotations

import os

import pytest
import torch

from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import save_tiny_model_dir
from tests.trainer.config.test_key_effects import typed
from tests.workers.test_lora_workers import ARR, _batch, _train_batch

OVERRIDES = ("algorithm.adv_estimator=grpo", f"{ARR}.rollout.n=2", f"{ARR}.rollout.name=hf", f"{ARR}.rollout.mode=sync",
             f"{ARR}.actor.ppo_mini_batch_size=2", f"{ARR}.actor.ppo_micro_batch_size_per_gpu=1",
             "data.train_batch_size=2",
             f"{ARR}.actor.use_kl_loss=true", f"{ARR}.actor.optim.lr=0.01", f"{ARR}.actor.grad_clip=1e6",
             "data.max_prompt_length=6", "data.max_response_length=5", "critic.model.tokenizer_path=null",
             "trainer.n_gpus_per_node=2", f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
             f"{ARR}.ref.fsdp_config.mixed_precision.param_dtype=fp32")


def _rank(rank: int, port: int, model_dir: str, fsdp_size: int, ckpt: str, results) -> None:
    import torch.distributed as dist

    from verl.workers import fsdp_workers

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    fsdp_workers.measure_matmul_peak = lambda device, dtype: 1e12  # not what is tested here
    try:
        config = typed(f"{ARR}.model.path={model_dir}", f"critic.model.path={model_dir}", *OVERRIDES,
                       f"{ARR}.actor.fsdp_config.fsdp_size={fsdp_size}")
        worker = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout_ref")
        worker.init_model()
        param = next(worker.actor_module.parameters())
        # placements print as R (Replicate) and S(0) (Shard(0))
        out = {"mesh": tuple(param.device_mesh.shape), "placements": [str(p) for p in param.placements]}
        mine = slice(2 * rank, 2 * rank + 2)  # the 4-row batch (2 prompts x n=2): this rank's half
        data = _train_batch(worker, _batch()[mine])
        worker.update_actor(data)
        out["weights"] = {n: p.detach().full_tensor().clone() for n, p in worker.actor_module.named_parameters()}
        probe = _batch(seed=5)[mine]
        out["after"] = worker.compute_log_prob(probe).batch["old_log_probs"].clone()
        if ckpt:
            worker.save_checkpoint(ckpt, None, 1, None)
            resumed = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout_ref")
            resumed.init_model()
            resumed.load_checkpoint(ckpt)
            out["resumed"] = resumed.compute_log_prob(probe).batch["old_log_probs"].clone()
        results[rank] = out
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(400)
def test_hsdp_replicates_the_weights_and_trains_as_full_sharding(tmp_path):
    model_dir = save_tiny_model_dir(tmp_path / "model")
    hsdp = run_ranks(_rank, free_port(), model_dir, 1, str(tmp_path / "ckpt"), nprocs=2, timeout_s=380)
    full = run_ranks(_rank, free_port(), model_dir, -1, "", nprocs=2, timeout_s=380)
    assert hsdp[0]["mesh"] == (2, 1) and hsdp[0]["placements"] == ["R", "S(0)"]
    assert full[0]["mesh"] == (2,) and full[0]["placements"] == ["S(0)"]
    for name, weight in full[0]["weights"].items():
        torch.testing.assert_close(hsdp[0]["weights"][name], weight, rtol=1e-5, atol=1e-6)
        assert torch.equal(hsdp[0]["weights"][name], hsdp[1]["weights"][name]), name  # replicas agree
    for rank in (0, 1):
        torch.testing.assert_close(hsdp[rank]["after"], full[rank]["after"], rtol=1e-5, atol=1e-5)
        assert torch.equal(hsdp[rank]["resumed"], hsdp[rank]["after"])


def test_fsdp_size_divides_each_roles_ranks_or_covers_them_all():
    from verl.trainer.config import ConfigError, ConfigWarning, load_config, validate_config

    base = [*OVERRIDES, "trainer.n_gpus_per_node=4", "data.train_batch_size=4", "critic.ppo_mini_batch_size=2",
            "critic.ppo_micro_batch_size_per_gpu=1", "trainer.logger=[]"]
    ok = validate_config(load_config([*base, f"{ARR}.actor.fsdp_config.fsdp_size=2"]), check_files=False)
    assert ok.actor_rollout_ref.actor.fsdp_config.fsdp_size == 2
    with pytest.raises(ConfigError) as info:
        validate_config(load_config([*base, f"{ARR}.actor.fsdp_config.fsdp_size=3",
                                     "algorithm.adv_estimator=gae", "critic.model.fsdp_config.fsdp_size=0"]),
                        check_files=False)
    problems = info.value.problems
    assert any(p.startswith(f"{ARR}.actor.fsdp_config.fsdp_size=3 does not divide the role's 4 ranks") and
               "[1, 2, 4]" in p for p in problems), problems
    assert any(p.startswith("critic.model.fsdp_config.fsdp_size=0: use -1") for p in problems), problems
    # more than the role's ranks (a script written for a bigger cluster): one group over all of them, as upstream
    with pytest.warns(ConfigWarning, match=r"fsdp_size=32 is more than the role's 4 ranks"):
        big = validate_config(load_config([*base, f"{ARR}.actor.fsdp_config.fsdp_size=32"]), check_files=False)
    assert big.actor_rollout_ref.actor.fsdp_config.fsdp_size == 32
    import torch.distributed as dist

    from verl.workers.fsdp_utils import create_device_mesh

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:  # the mesh the worker builds from it: one dimension, all ranks in one shard group
        mesh = create_device_mesh(1, 32)
        assert mesh.ndim == 1 and mesh.size() == 1
    finally:
        dist.destroy_process_group()
