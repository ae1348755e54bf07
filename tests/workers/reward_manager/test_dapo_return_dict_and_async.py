"""A reward manager's own `return_dict` never reaches compute_score, and an `async def` compute_score is awaited
(in this process and in the timed scoring processes alike)."""

from __future__ import annotations

import asyncio

import pytest
import torch
from omegaconf import OmegaConf

from tests.workers.reward_manager.conftest import make_batch
from verl.rewards.score_pool import call_to_completion
from verl.workers.reward_manager import DAPORewardManager, NaiveRewardManager

SAMPLES = [("Tom has 12", "#### 14", "14"), ("Anna has 9", "#### 10", "11")]


def strict_score(data_source, solution_str, ground_truth, extra_info):
    # no **kwargs: any extra keyword from the manager would raise TypeError here
    return float(solution_str.strip().endswith(str(ground_truth)))


async def async_score(data_source, solution_str, ground_truth, extra_info):
    await asyncio.sleep(0.01)
    return float(solution_str.strip().endswith(str(ground_truth)))


def _last_token_scores(tensor, lengths):
    return [tensor[row, n - 1].item() for row, n in enumerate(lengths)]


def test_return_dict_in_constructor_is_the_call_default(tokenizer):
    data, lengths = make_batch(tokenizer, SAMPLES)
    cfg = OmegaConf.create({"enable": True, "len": 4, "penalty_factor": 1.0, "log": False})
    plain = DAPORewardManager(tokenizer, 0, strict_score, max_resp_len=32, overlong_buffer_cfg=cfg, return_dict=False,
                              timeout=None)
    reward = plain(data)
    assert isinstance(reward, torch.Tensor) and _last_token_scores(reward, lengths) == [1.0, 0.0]
    as_dict = NaiveRewardManager(tokenizer, 0, strict_score, return_dict=True, timeout=None)
    out = as_dict(data)
    assert set(out) == {"reward_tensor", "reward_extra_info"}
    assert isinstance(as_dict(data, return_dict=False), torch.Tensor)  # an explicit argument still wins


@pytest.mark.parametrize("timeout", [None, 60])
def test_async_compute_score_is_awaited(tokenizer, timeout):
    data, lengths = make_batch(tokenizer, SAMPLES)
    manager = DAPORewardManager(tokenizer, 0, async_score, max_resp_len=32, timeout=timeout, num_processes=1)
    try:
        reward = manager(data)
    finally:
        manager.close()
    assert _last_token_scores(reward, lengths) == [1.0, 0.0]


def test_call_to_completion_inside_a_running_loop():
    async def inside():
        return call_to_completion(async_score, {"data_source": "x", "solution_str": "1", "ground_truth": "1",
                                                "extra_info": None})

    assert asyncio.run(inside()) == 1.0
    assert call_to_completion(strict_score, {"data_source": "x", "solution_str": "2", "ground_truth": "1",
                                             "extra_info": None}) == 0.0
