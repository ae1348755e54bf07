"""Per-stage tokens/s and trainer.balance_batch: hand-computed metrics, every sample kept, per-sample results
unchanged by the reordering."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from tests.helpers.tiny_model import rollout_batch, tiny_llama
from tests.workers.actor.test_dp_actor import actor_config
from verl.protocol import DataProto
from verl.trainer.ppo.metric_utils import compute_stage_throughput_metrics
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.workers.actor import DataParallelPPOActor


def test_stage_tokens_per_second_by_hand():
    # prompt width 3, response width 4: row 0 has 2 + 3 real tokens, row 1 has 3 + 4 -> 12 tokens, 7 responses
    mask = torch.tensor([[0, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]])
    batch = DataProto.from_dict({"attention_mask": mask, "responses": torch.zeros(2, 4, dtype=torch.long)})
    timing = {"gen": 0.5, "old_log_prob": 2.0, "update_actor": 4.0, "reward": 1.0, "step": 8.0}
    metrics = compute_stage_throughput_metrics(batch, timing)
    assert metrics == {"perf/tokens_per_s/gen": 14.0,  # 7 response tokens / 0.5 s
                       "perf/tokens_per_s/old_log_prob": 6.0,  # 12 tokens / 2 s
                       "perf/tokens_per_s/update_actor": 3.0}  # reward and step are not model stages


# real tokens per row: the first half is long, the second short, so consecutive halves are unbalanced (34 vs 10)
PROMPTS = [5, 5, 4, 4, 1, 1, 1, 1]
RESPONSES = [5, 4, 4, 3, 0, 1, 2, 3]


def _trainer(world: int) -> RayPPOTrainer:
    trainer = RayPPOTrainer.__new__(RayPPOTrainer)  # only _balance_batch is exercised: no Ray, no workers
    trainer.actor_rollout_wg = types.SimpleNamespace(world_size=world)
    return trainer


def _batch() -> DataProto:
    data = rollout_batch(PROMPTS, [max(1, n) for n in RESPONSES], prompt_len=5, response_len=5)
    data.batch["attention_mask"][4, 5:] = 0  # a row with no response token at all still counts its prompt
    data.non_tensor_batch["row"] = np.arange(len(data), dtype=object)
    return data


def test_balance_batch_metrics_by_hand_and_keeps_every_row():
    data = _batch()
    seqlens = data.batch["attention_mask"].sum(-1).tolist()
    assert seqlens == [10, 9, 8, 7, 1, 2, 3, 4]
    metrics = {}
    _trainer(world=2)._balance_batch(data, metrics)
    # consecutive halves: 10+9+8+7 = 34 and 1+2+3+4 = 10; a perfect equal-count split exists: 22 and 22
    assert metrics["global_seqlen/min"] == 10 and metrics["global_seqlen/max"] == 34
    assert metrics["global_seqlen/minmax_diff"] == 24
    assert metrics["global_seqlen/balanced_min"] == 22 and metrics["global_seqlen/balanced_max"] == 22
    assert metrics["global_seqlen/mean"] == 22
    assert metrics["perf/balance_max_over_min_tokens"] == 1.0
    assert sorted(data.non_tensor_batch["row"].tolist()) == list(range(8))
    new_lengths = data.batch["attention_mask"].sum(-1).tolist()
    assert sum(new_lengths[:4]) == sum(new_lengths[4:]) == 22  # DP_COMPUTE_PROTO gives rank r the r-th half


def test_balance_batch_single_rank_is_a_no_op():
    data = _batch()
    metrics = {}
    _trainer(world=1)._balance_batch(data, metrics)
    assert metrics == {} and data.non_tensor_batch["row"].tolist() == list(range(8))


def test_balanced_order_gives_the_same_per_sample_log_probs():
    data = _batch()
    actor = DataParallelPPOActor(actor_config(), tiny_llama())
    before, _ = actor.compute_log_prob(data)
    _trainer(world=2)._balance_batch(data, {})
    after, _ = actor.compute_log_prob(data)
    rows = torch.tensor(data.non_tensor_batch["row"].tolist())
    assert not torch.equal(rows, torch.arange(8))  # really reordered
    torch.testing.assert_close(after, before[rows], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("stage", ["ref", "values", "update_critic"])
def test_stage_tokens_without_timing_are_absent(stage):
    mask = torch.ones(1, 3, dtype=torch.long)
    batch = DataProto.from_dict({"attention_mask": mask, "responses": torch.zeros(1, 1, dtype=torch.long)})
    assert compute_stage_throughput_metrics(batch, {stage: 0.0}) == {}
    assert compute_stage_throughput_metrics(batch, {stage: 1.5}) == {f"perf/tokens_per_s/{stage}": 2.0}
