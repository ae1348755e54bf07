"""Ulysses with videos on 2 gloo ranks (one SP group): a tiny Qwen2-VL / Qwen2.5-VL / Qwen3-VL actor and critic at sp=2
give the log-probs, values and updated weights (vision tower included) of sp=1 on one process, with rows holding
videos (and an image) whose tokens land in either rank's slice of the packed row."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.ranks import free_port, run_ranks
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.actor.test_vlm_actor_video import video_batch
from tests.workers.actor.test_vlm_ulysses import WORLD, _worker
from verl.workers.actor import DataParallelPPOActor


@pytest.mark.timeout(300)
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_sp2_with_videos_matches_sp1(tmp_path, family):
    from tests.helpers.tiny_vlm import tiny_vlm
    from verl.models.value_head import load_value_model

    data, _ = video_batch(tmp_path, family)
    data.meta_info["micro_batch_size"] = 2
    old, _ = DataParallelPPOActor(actor_config(use_remove_padding=True), tiny_vlm(family)).compute_log_prob(data)
    gen = torch.Generator().manual_seed(7)
    data.batch["old_log_probs"] = old + 0.05 * torch.randn(old.shape, generator=gen)
    data.batch["advantages"] = torch.randn(old.shape, generator=gen) * data.batch["response_mask"]
    data.batch["values"] = 0.1 * torch.randn(old.shape, generator=gen)
    data.batch["returns"] = torch.randn(old.shape, generator=gen)
    critic = load_value_model(str(tmp_path / family), score_init_std=0.5).float().train()
    results = run_ranks(_worker, free_port(), family, data, critic, nprocs=WORLD, timeout_s=280)
    for rank in range(WORLD):
        out = results[rank]
        assert out["log_probs"] < 1e-4 and out["values"] < 1e-4, out
        assert out["vision_moved"] > 1e-3
        assert out["actor_params"] < 1e-4 and out["critic_params"] < 1e-4, out
