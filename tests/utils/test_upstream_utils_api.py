"""Upstream's utils names (issue 34): hand-computed cases for the math, the documented errors for the rest."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from verl.utils import as_torch_index, group_mean_std
from verl.utils.device import is_npu_available
from verl.utils.import_utils import load_extern_object
from verl.utils.metric import reduce_metrics
from verl.utils.metric.utils import AggregationType, Metric
from verl.utils.model import create_random_mask, update_model_config
from verl.utils.py_functional import temp_env_var, timeout_limit
from verl.utils.seqlen_balancing import (
    ceildiv,
    get_group_balanced_partitions,
    prepare_dynamic_batch,
    restore_dynamic_batch,
)
from verl.utils.torch_functional import distributed_masked_mean, distributed_mean_max_min_std, expand_as_nested

# -- torch_functional --------------------------------------------------------------------------------------------


def _distributed_stats(rank: int, world_size: int, init_file: str, out_file: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    # rank 0 holds [1, 2, 3] with the 3 masked out; rank 1 holds [4, 6] with both kept
    values = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0, 6.0])][rank]
    mask = [torch.tensor([1, 1, 0]), torch.tensor([1, 1])][rank]
    masked = distributed_masked_mean(values, mask)
    mean, vmax, vmin, std = distributed_mean_max_min_std(values)
    only_mean = distributed_mean_max_min_std(values, compute_max=False, compute_min=False, compute_std=False)
    if rank == 0:
        torch.save({"masked": masked, "stats": (mean, vmax, vmin, std), "only_mean": only_mean}, out_file)
    dist.destroy_process_group()


def test_distributed_masked_mean_and_stats_reduce_over_two_ranks(tmp_path):
    out = tmp_path / "out.pt"
    mp.spawn(_distributed_stats, args=(2, str(tmp_path / "init"), str(out)), nprocs=2, join=True)
    got = torch.load(out)
    # kept values 1, 2, 4, 6 -> 13 / 4
    assert got["masked"].item() == pytest.approx(13 / 4, rel=1e-6)
    mean, vmax, vmin, std = got["stats"]
    # all values 1, 2, 3, 4, 6: mean 16/5 = 3.2; squared deviations 4.84+1.44+0.04+0.64+7.84 = 14.8; /4 -> 3.7
    assert mean.item() == pytest.approx(3.2, rel=1e-6)
    assert (vmax.item(), vmin.item()) == (6.0, 1.0)
    assert std.item() == pytest.approx(3.7**0.5, rel=1e-6)
    assert got["only_mean"][0].item() == pytest.approx(3.2, rel=1e-6)
    assert got["only_mean"][1:] == (None, None, None)


def test_expand_as_nested_repeats_each_row_value_and_keeps_offsets():
    nested = torch.nested.as_nested_tensor([torch.randn(2), torch.randn(3), torch.randn(4)], layout=torch.jagged)
    out = expand_as_nested(torch.tensor([1, 2, 3]), nested)
    assert out.values().tolist() == [1, 1, 2, 2, 2, 3, 3, 3, 3]
    assert torch.equal(out.offsets(), nested.offsets())
    with pytest.raises(AssertionError):
        expand_as_nested(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3]))  # not nested
    with pytest.raises(AssertionError):
        expand_as_nested(torch.tensor([1, 2, 3, 4]), nested)  # one value too many
    with pytest.raises(AssertionError):
        expand_as_nested(torch.tensor([[1, 2, 3]]), nested)  # not 1-D
    with pytest.raises(AssertionError):
        expand_as_nested(torch.tensor([1, 2, 3]), nested.unsqueeze(-1))  # 3-D


# -- groupwise ---------------------------------------------------------------------------------------------------


def test_as_torch_index_keeps_integers_and_factorises_the_rest():
    assert as_torch_index([2, 2, 5, 7, 5, 2]).tolist() == [2, 2, 5, 7, 5, 2]
    assert as_torch_index(np.array([1.0000001, 2.0, 1.0, 3.0000000001])).tolist() == [1, 2, 1, 3]
    assert as_torch_index(["3", "1", "3"]).tolist() == [3, 1, 3]  # numeric strings
    # strings factorised in sorted order: "0042" < "42" < "a" < "b" < "c"; "0042" and 42 stay apart
    assert as_torch_index(["a", "b", "a", "c", "0042", 42]).tolist() == [2, 3, 2, 4, 0, 1]
    assert as_torch_index([0.5, 1.5, 0.5]).tolist() == [0, 1, 0]
    ids = as_torch_index(torch.tensor([True, False, True]))
    assert ids.dtype == torch.long and ids.tolist() == [1, 0, 1]


def test_group_mean_std_by_hand():
    # group 0: 1 and 3 -> mean 2, var ((1-2)^2 + (3-2)^2) / (2-1) = 2; group 1: a lone 2 -> mean 0, std 1
    mean, std, count = group_mean_std(torch.tensor([1.0, 2.0, 3.0]), as_torch_index([0, 1, 0]))
    assert mean.tolist() == [2.0, 0.0]
    assert std[0].item() == pytest.approx(2**0.5, rel=1e-6) and std[1].item() == 1.0
    assert count.tolist() == [2.0, 1.0]
    _, std_same, _ = group_mean_std(torch.tensor([5.0, 5.0]), torch.tensor([0, 0]), eps=1e-6)
    assert std_same.item() == pytest.approx(1e-3)  # sqrt of the variance floor
    empty = group_mean_std(torch.tensor([]), torch.tensor([], dtype=torch.long))
    assert all(t.numel() == 0 for t in empty)
    with pytest.raises(ValueError, match="group ids"):
        group_mean_std(torch.tensor([1.0, 2.0]), torch.tensor([0]))


# -- metric ------------------------------------------------------------------------------------------------------


def test_metric_aggregations_weights_and_errors():
    assert Metric(aggregation="mean").aggregation is AggregationType.MEAN
    with pytest.raises(ValueError):
        Metric(aggregation="median")
    m = Metric("mean")
    m.append(torch.tensor(3.0))
    m.append(1)
    assert m.values == [3.0, 1] and m.weights == [1.0, 1.0]
    with pytest.raises(ValueError, match="scalar"):
        m.append(torch.tensor([1.0, 2.0]))
    assert Metric("mean", value=[1.0, 3.0], weight=[10.0, 30.0]).aggregate() == pytest.approx(2.5)  # 100 / 40
    assert Metric("sum", value=[2.0, 3.0], weight=[5.0, 10.0]).aggregate() == 40.0
    assert Metric("min", value=[3.0, 1.0, 4.0]).aggregate() == 1.0
    assert Metric("max", value=[3.0, 1.0, 4.0]).aggregate() == 4.0
    target = Metric("mean", value=3.0)
    target.append(Metric("mean", value=[1.0, 2.0], weight=[10.0, 20.0]))
    assert target.values == [3.0, 1.0, 2.0] and target.weights == [1.0, 10.0, 20.0]
    with pytest.raises(ValueError):
        Metric("mean").extend(Metric("sum"))
    with pytest.raises(ValueError):
        Metric("mean").extend([1.0, 2.0, 3.0], weights=[1.0, 2.0])
    broadcast = Metric("mean")
    broadcast.extend([1.0, 2.0], weights=4.0)
    assert broadcast.weights == [4.0, 4.0]
    assert Metric("max", value=[1.0, 2.0]).init_list().values == []
    made = Metric.from_dict({"loss": 1.0, "acc": 0.9}, aggregation="mean")
    assert made["acc"].values == [0.9] and made["loss"].aggregation is AggregationType.MEAN


def test_metric_aggregate_dp_by_hand():
    def ranks(agg, *values):
        return [Metric(agg, value=list(v)) for v in values]

    # positions averaged over ranks: [2, 3]; then summed -> 5, or averaged -> 2.5
    assert Metric.aggregate_dp(ranks("sum", [1.0, 2.0], [3.0, 4.0])) == 5.0
    assert Metric.aggregate_dp(ranks("mean", [1.0, 2.0], [3.0, 4.0])) == 2.5
    assert Metric.aggregate_dp(ranks("max", [1.0, 2.0], [3.0, 4.0])) == 4.0
    assert Metric.aggregate_dp(ranks("min", [1.0, 2.0], [3.0, 4.0])) == 1.0
    # rank weights 90 / 10: positions (0*90 + 10*10)/100 = 1 and (0*90 + 20*10)/100 = 2 -> mean 1.5
    assert Metric.aggregate_dp(ranks("mean", [0.0, 0.0], [10.0, 20.0]), weights=[90, 10]) == pytest.approx(1.5)
    with pytest.raises(ValueError):
        Metric.aggregate_dp(ranks("sum", [1.0, 2.0], [3.0, 4.0, 5.0]))
    with pytest.raises(ValueError):
        Metric.aggregate_dp(ranks("mean", [1.0], [2.0]), weights=[1.0])


def test_reduce_metrics_reduces_metric_objects_by_their_aggregation():
    total = Metric("sum", value=[1.0, 2.0, 3.0])
    per_rank = [Metric("sum", value=[1.0, 2.0]), Metric("sum", value=[3.0, 4.0])]
    assert reduce_metrics({"tokens": total, "per_rank": per_rank, "loss": [4.0, 5.0, 6.0]}) == {
        "tokens": 6.0, "per_rank": 5.0, "loss": 5.0,
    }  # fmt: skip


# -- seqlen_balancing --------------------------------------------------------------------------------------------


def test_ceildiv():
    assert [ceildiv(7, 2), ceildiv(8, 2), ceildiv(1, 3), ceildiv(0, 5), ceildiv(10**20 + 1, 10**20)] == [4, 4, 1, 0, 2]


def test_prepare_and_restore_dynamic_batch_round_trip():
    from verl.protocol import DataProto

    lengths = [5, 1, 4, 2, 3, 3]
    mask = torch.zeros(6, 6, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    data = DataProto.from_dict(
        {"attention_mask": mask, "row": torch.arange(6)}, non_tensors={"name": np.array(list("abcdef"), dtype=object)},
        meta_info={"temperature": 0.7},
    )
    micro, idx = prepare_dynamic_batch(data, max_token_len=6)
    assert sorted(i for part in idx for i in part) == list(range(6))
    for mb, part in zip(micro, idx, strict=True):
        assert mb.batch["attention_mask"].sum() <= 6
        assert mb.batch["row"].tolist() == part and list(mb.non_tensor_batch["name"]) == [list("abcdef")[i] for i in part]
        assert mb.meta_info == {"temperature": 0.7} and mb.meta_info is not data.meta_info
    outputs = torch.cat([mb.batch["row"] * 10 for mb in micro])
    assert restore_dynamic_batch(outputs, idx).tolist() == [0, 10, 20, 30, 40, 50]
    nested = torch.nested.as_nested_tensor([torch.full((i + 1,), i) for i in outputs.tolist()], layout=torch.jagged)
    restored = restore_dynamic_batch(nested, idx)
    assert [t[0].item() for t in restored.unbind()] == [0, 10, 20, 30, 40, 50]
    with pytest.raises(AssertionError):
        restore_dynamic_batch(outputs[:5], idx)


def test_group_balanced_partitions_keep_uid_groups_together():
    # groups: a (rows 0,1: 10+10), b (2,3: 1+1), c (4,5: 9+9), d (6,7: 2+2) -> sums 20, 2, 18, 4
    # two partitions of two groups each, balanced: {a, b} = 22 and {c, d} = 22
    seqlens = [10, 10, 1, 1, 9, 9, 2, 2]
    parts = get_group_balanced_partitions(seqlens, ["a", "a", "b", "b", "c", "c", "d", "d"], k_partitions=2)
    assert sorted(parts) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(AssertionError):
        get_group_balanced_partitions([1, 1], ["a", "a"], k_partitions=2)


# -- model, device ----------------------------------------------------------------------------------------------


def test_update_model_config_sets_nested_attributes():
    from transformers import LlamaConfig

    cfg = LlamaConfig(hidden_size=16, num_attention_heads=2, num_hidden_layers=1, intermediate_size=32)
    cfg.rope_scaling_holder = LlamaConfig()  # any sub-config object
    update_model_config(cfg, {"hidden_size": 32, "rope_scaling_holder": {"vocab_size": 7}})
    assert cfg.hidden_size == 32 and cfg.rope_scaling_holder.vocab_size == 7


def test_create_random_mask_shapes_each_row_as_left_pad_valid_right_pad():
    ids = torch.zeros(64, 20, dtype=torch.long)
    mask = create_random_mask(ids, max_ratio_of_valid_token=0.5, max_ratio_of_left_padding=0.25,
                              min_ratio_of_valid_token=0.2)
    assert mask.shape == ids.shape and mask.dtype == torch.int64
    for row in mask.tolist():
        first = row.index(1)
        n = sum(row)
        assert first <= 5 and 4 <= n <= 10 and row[first : first + n] == [1] * n  # one contiguous run
    with pytest.raises(AssertionError):
        create_random_mask(ids, max_ratio_of_valid_token=0.9, max_ratio_of_left_padding=0.5)  # 18 + 10 > 20


def test_is_npu_available_is_false_without_torch_npu():
    assert is_npu_available() is False


# -- py_functional, import_utils ---------------------------------------------------------------------------------


def test_temp_env_var_sets_and_restores(monkeypatch):
    monkeypatch.setenv("VERL_T_EXISTING", "orig")
    monkeypatch.delenv("VERL_T_NEW", raising=False)
    with temp_env_var("VERL_T_EXISTING", "a") as value, temp_env_var("VERL_T_NEW", ""):
        assert value is None and os.environ["VERL_T_EXISTING"] == "a" and os.environ["VERL_T_NEW"] == ""
        with temp_env_var("VERL_T_EXISTING", "b"):
            assert os.environ["VERL_T_EXISTING"] == "b"
        assert os.environ["VERL_T_EXISTING"] == "a"
    assert os.environ["VERL_T_EXISTING"] == "orig" and "VERL_T_NEW" not in os.environ
    with pytest.raises(KeyError), temp_env_var("VERL_T_EXISTING", "c"):
        raise KeyError("boom")
    assert os.environ["VERL_T_EXISTING"] == "orig"


@timeout_limit(0.3)
def _sleeps():
    time.sleep(10)


@timeout_limit(10)
def _doubles(x):
    return 2 * x


@timeout_limit(10)
def _raises():
    raise KeyError("inside")


@pytest.mark.parametrize("use_signals", [False, True])
def test_timeout_limit(use_signals):
    with pytest.raises(TimeoutError):  # a sleep(10) left to finish would return, not raise
        (timeout_limit(0.3, use_signals=use_signals)(time.sleep))(10)
    assert timeout_limit(10, use_signals=use_signals)(abs)(-3) == 3


def test_timeout_limit_child_process_returns_values_and_reraises():
    with pytest.raises(TimeoutError):
        _sleeps()
    assert _doubles(21) == 42
    with pytest.raises(KeyError, match="inside"):
        _raises()


def test_load_extern_object(tmp_path):
    module = tmp_path / "mod.py"
    module.write_text("CONST = 'v'\nclass K:\n    def __init__(self, x='d'):\n        self.x = x\ndef f():\n    return 7\n")
    assert load_extern_object(str(module), "CONST") == "v"
    assert load_extern_object(str(module), "K")("c").x == "c"
    assert load_extern_object(str(module), "f")() == 7
    assert load_extern_object("pkg://verl.utils.model", "update_model_config") is update_model_config
    with pytest.raises(FileNotFoundError):
        load_extern_object(str(tmp_path / "missing.py"), "K")
    with pytest.raises(AttributeError):
        load_extern_object(str(module), "Missing")
    broken = tmp_path / "broken.py"
    broken.write_text("This is not valid Python :")
    with pytest.raises(RuntimeError):
        load_extern_object(str(broken), "K")
