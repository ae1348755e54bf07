import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from verl.utils.metric import append_to_dict, reduce_metrics
from verl.utils.seqlen_balancing import (
    get_reverse_idx,
    get_seqlen_balanced_partitions,
    log_seqlen_unbalance,
    rearrange_micro_batches,
)


def _sums(lengths, parts):
    return sorted(sum(lengths[i] for i in p) for p in parts)


def test_kk_hand_example_perfect_split():
    # differencing 10-7=3, 5-3=2, 3-2=1, 1-1=0: a perfect split, {10, 3} and {7, 5, 1} = 13 each
    parts = get_seqlen_balanced_partitions([10, 7, 5, 3, 1], 2, equal_size=False)
    assert _sums([10, 7, 5, 3, 1], parts) == [13, 13]
    # the textbook case where differencing is not optimal: 8-7, 6-5, 4-1, 3-1 -> difference 2 (optimum is 0)
    assert _sums([8, 7, 6, 5, 4], get_seqlen_balanced_partitions([8, 7, 6, 5, 4], 2, False)) == [14, 16]


def test_equal_size_gives_equal_counts():
    lengths = [10, 1, 9, 2, 8, 3, 7, 4]
    parts = get_seqlen_balanced_partitions(lengths, 4, equal_size=True)
    assert [len(p) for p in parts] == [2, 2, 2, 2]
    assert _sums(lengths, parts) == [11, 11, 11, 11]


def test_partition_errors_name_the_problem():
    with pytest.raises(ValueError, match="k_partitions"):
        get_seqlen_balanced_partitions([1, 2], 3, equal_size=False)
    with pytest.raises(ValueError, match="divisible"):
        get_seqlen_balanced_partitions([1, 2, 3], 2, equal_size=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=30), st.integers(1, 6), st.booleans())
def test_partitions_cover_every_index_once(lengths, k, equal):
    k = min(k, len(lengths))
    if equal:
        lengths = lengths[: len(lengths) - len(lengths) % k]
    parts = get_seqlen_balanced_partitions(lengths, k, equal_size=equal)
    assert len(parts) == k and all(parts)
    assert sorted(i for p in parts for i in p) == list(range(len(lengths)))
    if equal:
        assert {len(p) for p in parts} == {len(lengths) // k}
    else:
        # largest differencing is never worse than the largest item above the mean
        sums = [sum(lengths[i] for i in p) for p in parts]
        assert max(sums) - sum(lengths) / k <= max(lengths) + 1e-9


def _batch(lengths, width=10):
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, width - n:] = 1
    return TensorDict({"attention_mask": mask, "row": torch.arange(len(lengths))}, batch_size=[len(lengths)])


def test_rearrange_respects_budget_and_reverses():
    lengths = [9, 1, 5, 5, 3, 7, 2]
    micro, indices = rearrange_micro_batches(_batch(lengths), max_token_len=10)
    assert all(int(m["attention_mask"].sum()) <= 10 for m in micro)
    assert sum(len(m) for m in micro) == len(lengths)
    flat = [i for group in indices for i in group]
    order = torch.cat([m["row"] for m in micro])
    assert order.tolist() == flat
    assert order[torch.tensor(get_reverse_idx(flat))].tolist() == list(range(len(lengths)))


def test_rearrange_rejects_row_longer_than_budget():
    with pytest.raises(ValueError, match="max_token_len"):
        rearrange_micro_batches(_batch([8, 2]), max_token_len=5)


def test_get_reverse_idx_hand():
    assert get_reverse_idx([2, 0, 1]) == [1, 2, 0]


def test_log_seqlen_unbalance():
    out = log_seqlen_unbalance([4, 4, 1, 1], [[0, 2], [1, 3]], prefix="p")
    assert out["p/minmax_diff"] == 6.0 and out["p/balanced_max"] == 5.0 and out["p/mean"] == 5.0


def test_metrics_append_and_reduce():
    metrics = {}
    append_to_dict(metrics, {"a": 1.0, "b": 2})
    append_to_dict(metrics, {"a": 3.0})
    assert metrics == {"a": [1.0, 3.0], "b": [2]}
    assert reduce_metrics({**metrics, "c": 5}) == {"a": 2.0, "b": 2.0, "c": 5.0}
    reduced = reduce_metrics({"d": [], "per_rank": [[1.0, 2.0], [3.0, 6.0]]})  # as DataProto.concat gathers them
    assert math.isnan(reduced["d"]) and reduced["per_rank"] == 3.0  # empty -> NaN, as upstream
