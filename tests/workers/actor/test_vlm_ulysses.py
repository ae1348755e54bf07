"""Ulysses with images on 2 gloo ranks (one SP group): a tiny Qwen2-VL / Qwen2.5-VL / Qwen3-VL actor and critic at sp=2 give
the log-probs, values and updated weights (vision tower included) of sp=1 on one process, with image rows whose
image tokens land in either rank's slice of the packed row."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist

from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_vlm import tiny_vlm
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.actor.test_vlm_actor import vlm_batch
from tests.workers.critic.test_dp_critic import critic_config
from tests.workers.test_ulysses import _max_diff, _params
from verl.utils.ulysses import create_ulysses_group, set_ulysses_sequence_parallel_group
from verl.workers.actor import DataParallelPPOActor
from verl.workers.critic import DataParallelPPOCritic

WORLD = 2
ACTOR_CFG = {"use_remove_padding": True, "ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2,
             "grad_clip": 1e6}
CRITIC_CFG = {"model.use_remove_padding": True, "ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2,
              "forward_micro_batch_size_per_gpu": 2, "grad_clip": 1e6}


def _vlm_shard(model):
    """Each vision block and decoder layer its own FSDP unit, as apply_fsdp2 wraps a VLM."""
    from torch.distributed.fsdp import fully_shard

    for block in [*model.model.visual.blocks, *model.model.language_model.layers]:
        fully_shard(block)
    fully_shard(model)
    return model


def _actor(model, data, sp):
    actor = DataParallelPPOActor(actor_config(ulysses_sequence_parallel_size=sp, **ACTOR_CFG), model,
                                 torch.optim.SGD(model.parameters(), lr=0.5))
    log_probs, _ = actor.compute_log_prob(data)
    actor.update_policy(data)
    return log_probs


def _critic(model, data, sp):
    critic = DataParallelPPOCritic(critic_config(ulysses_sequence_parallel_size=sp, **CRITIC_CFG), model,
                                   torch.optim.SGD(model.parameters(), lr=0.5))
    values = critic.compute_values(data)
    critic.update_critic(data)
    return values


def _worker(rank: int, port: int, family: str, data, critic_base, results) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        set_ulysses_sequence_parallel_group(create_ulysses_group(WORLD, "actor"))
        out = {}
        base = tiny_vlm(family).train()
        ref = copy.deepcopy(base)
        ref_lp = _actor(ref, copy.deepcopy(data), sp=1)
        model = _vlm_shard(copy.deepcopy(base))
        lp = _actor(model, copy.deepcopy(data), sp=2)
        mask = data.batch["response_mask"].bool()
        out["log_probs"] = (lp - ref_lp)[mask].abs().max().item()
        moved = _params(ref)
        out["vision_moved"] = max((moved[k] - v).abs().max().item() for k, v in _params(base).items()
                                  if ".visual." in f".{k}")
        out["actor_params"] = _max_diff(_params(model), moved)
        cref = copy.deepcopy(critic_base)
        ref_values = _critic(cref, copy.deepcopy(data), sp=1)
        cmodel = _vlm_shard(copy.deepcopy(critic_base))
        values = _critic(cmodel, copy.deepcopy(data), sp=2)
        out["values"] = (values - ref_values)[mask].abs().max().item()
        out["critic_params"] = _max_diff(_params(cmodel), _params(cref))
        results[rank] = out
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_sp2_with_images_matches_sp1(tmp_path, family):
    from tests.helpers.tiny_vlm import save_tiny_vlm_dir
    from verl.models.value_head import load_value_model

    data = vlm_batch(tmp_path / "data", family)
    old, _ = DataParallelPPOActor(actor_config(use_remove_padding=True), tiny_vlm(family)).compute_log_prob(data)
    gen = torch.Generator().manual_seed(7)
    data.batch["old_log_probs"] = old + 0.05 * torch.randn(old.shape, generator=gen)
    data.batch["advantages"] = torch.randn(old.shape, generator=gen) * data.batch["response_mask"]
    data.batch["values"] = 0.1 * torch.randn(old.shape, generator=gen)
    data.batch["returns"] = torch.randn(old.shape, generator=gen)
    critic = load_value_model(save_tiny_vlm_dir(tmp_path / "model", family), score_init_std=0.5).float().train()
    results = run_ranks(_worker, free_port(), family, data, critic, nprocs=WORLD, timeout_s=280)
    for rank in range(WORLD):
        out = results[rank]
        assert out["log_probs"] < 1e-4 and out["values"] < 1e-4, out
        assert out["vision_moved"] > 1e-3  # the update reached the vision tower ...
        assert out["actor_params"] < 1e-4 and out["critic_params"] < 1e-4, out  # ... the same at sp=2
