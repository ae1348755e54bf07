"""verl.utils.debug.metrics.calculate_debug_metrics and verl.utils.profiler.ProfilerConfig at upstream's paths."""

import math

import pytest
import torch

from verl.protocol import DataProto
from verl.utils.debug.metrics import calculate_debug_metrics
from verl.utils.profiler import ProfilerConfig


def _batch(mask_key):
    # two rows, response length 2; the second row's last token is padding
    rollout = torch.log(torch.tensor([[0.5, 0.2], [0.4, 0.9]]))
    actor = torch.log(torch.tensor([[0.6, 0.2], [0.1, 0.1]]))
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    return DataProto.from_dict(tensors={"rollout_log_probs": rollout, "old_log_probs": actor,
                                        "responses": torch.zeros(2, 2, dtype=torch.long), mask_key: mask})


@pytest.mark.parametrize("mask_key", ["attention_mask", "loss_mask"])
def test_calculate_debug_metrics_by_hand(mask_key):
    metrics = calculate_debug_metrics(_batch(mask_key))
    diffs = [0.1, 0.0, 0.3]  # |p_rollout - p_actor| on the three response tokens the mask keeps
    mean = sum(diffs) / 3
    assert metrics["training/rollout_probs_diff_valid"] == 1
    assert metrics["training/rollout_probs_diff_max"] == pytest.approx(0.3)
    assert metrics["training/rollout_probs_diff_mean"] == pytest.approx(mean)
    std = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3)
    assert metrics["training/rollout_probs_diff_std"] == pytest.approx(std, abs=1e-6)
    p, q = [0.5, 0.2, 0.4], [0.6, 0.2, 0.1]
    mp, mq = sum(p) / 3, sum(q) / 3
    cov = sum((a - mp) * (b - mq) for a, b in zip(p, q))
    corr = cov / math.sqrt(sum((a - mp) ** 2 for a in p) * sum((b - mq) ** 2 for b in q))
    assert metrics["training/rollout_actor_probs_pearson_corr"] == pytest.approx(corr, abs=1e-5)


def test_calculate_debug_metrics_names_a_missing_key():
    data = _batch("attention_mask")
    data.batch.pop("rollout_log_probs")
    with pytest.raises(KeyError, match="rollout_log_probs"):
        calculate_debug_metrics(data)


def test_profiler_config_defaults_union_and_intersect():
    default = ProfilerConfig()
    assert (default.enable, default.all_ranks, default.ranks, default.tool) == (False, False, [], None)
    a = ProfilerConfig(enable=True, ranks=[0, 1])
    b = ProfilerConfig(all_ranks=True, ranks=[1, 2])
    union = a.union(b)
    assert union.enable and union.all_ranks and union.ranks == [0, 1, 2]
    both = a.intersect(b)
    assert not both.enable and not both.all_ranks and both.ranks == [1]


def test_profiler_config_ranks_must_be_a_list():
    with pytest.raises(AssertionError, match="ranks"):
        ProfilerConfig(ranks=3)
