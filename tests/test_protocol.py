"""DataProto: construction, key operations, splitting/joining, iteration, persistence, futures."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from verl import DataProto as DataProtoFromPackage
from verl.protocol import (
    DataProto,
    DataProtoFuture,
    DataProtoItem,
    collate_fn,
    pad_dataproto_to_divisor,
    union_numpy_dict,
    union_tensor_dict,
    unpad_dataproto,
)


def make(n: int = 4, meta: dict | None = None) -> DataProto:
    """Row i holds obs=[i, 10*i], act=i (float), uid=f"u{i}"."""
    return DataProto.from_dict(
        tensors={"obs": torch.tensor([[i, 10 * i] for i in range(n)]).reshape(n, 2), "act": torch.arange(n).float()},
        non_tensors={"uid": [f"u{i}" for i in range(n)]},
        meta_info=meta if meta is not None else {"temperature": 1.0},
    )


def rows(dp: DataProto) -> list[int]:
    """The original row ids, read back from the data (obs[:, 0])."""
    return dp.batch["obs"][:, 0].tolist()


def assert_dp_equal(a: DataProto, b: DataProto) -> None:
    assert len(a) == len(b)
    assert (a.batch is None) == (b.batch is None)
    if a.batch is not None:
        assert set(a.batch.keys()) == set(b.batch.keys())
        for k in a.batch.keys():
            assert torch.equal(a.batch[k], b.batch[k]), k
    assert a.non_tensor_batch.keys() == b.non_tensor_batch.keys()
    for k in a.non_tensor_batch:
        assert a.non_tensor_batch[k].tolist() == b.non_tensor_batch[k].tolist(), k
    assert a.meta_info == b.meta_info


# -- construction ----------------------------------------------------------------------------------------------


def test_package_exports_dataproto():
    assert DataProtoFromPackage is DataProto


def test_non_tensor_length_mismatch_names_key():
    td = TensorDict({"x": torch.zeros(3)}, batch_size=[3])
    with pytest.raises(ValueError, match="'labels'.*2 rows.*3"):
        DataProto(batch=td, non_tensor_batch={"labels": np.array(["a", "b"], dtype=object)})


def test_non_tensor_lengths_must_agree_without_batch():
    with pytest.raises(ValueError, match="'b'"):
        DataProto(non_tensor_batch={"a": [1, 2], "b": [1, 2, 3]})


def test_from_dict_tensor_batch_mismatch_names_key():
    with pytest.raises(ValueError, match="'y'"):
        DataProto.from_dict({"x": torch.zeros(3, 2), "y": torch.zeros(4)})


def test_construction_type_errors():
    with pytest.raises(TypeError, match="TensorDict"):
        DataProto(batch={"x": torch.zeros(2)})
    with pytest.raises(TypeError, match="'s'"):
        DataProto(non_tensor_batch={"s": "not a list"})
    with pytest.raises(TypeError, match="'x'"):
        DataProto.from_dict({"x": [1, 2]})
    with pytest.raises(ValueError, match="batch dimension"):
        DataProto(batch=TensorDict({"x": torch.tensor(1.0)}, batch_size=[]))


def test_non_tensors_become_one_object_per_row():
    dp = DataProto.from_dict({"x": torch.zeros(2)}, non_tensors={"ids": [[1, 2], [3, 4]], "n": np.array([5, 6])})
    assert dp.non_tensor_batch["ids"].dtype == object
    assert dp.non_tensor_batch["ids"].shape == (2,)  # equal-length lists stay one list per row
    assert dp.non_tensor_batch["ids"][1] == [3, 4]
    assert dp.non_tensor_batch["n"].dtype == object and dp.non_tensor_batch["n"].tolist() == [5, 6]


def test_from_dict_values_and_lengths():
    dp = make(3)
    assert len(dp) == 3
    assert dp.batch.batch_size == torch.Size([3])
    assert dp.batch["obs"].tolist() == [[0, 0], [1, 10], [2, 20]]
    assert dp.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u2"]
    assert dp.meta_info == {"temperature": 1.0}

    with pytest.raises(AssertionError, match="num_batch_dims must be 1"):  # upstream's type; one batch dim
        DataProto.from_dict({"x": torch.zeros(2, 3, 4)}, num_batch_dims=2)

    only_objects = DataProto.from_dict(non_tensors={"s": ["a", "b", "c"]})
    assert only_objects.batch is None and len(only_objects) == 3
    assert len(DataProto()) == 0


def test_from_single_dict_splits_tensors_from_objects():
    dp = DataProto.from_single_dict(
        {"x": torch.tensor([1, 2]), "src": np.array(["gsm8k", "math"], dtype=object), "idx": [7, 8]},
        meta_info={"validate": True},
    )
    assert list(dp.batch.keys()) == ["x"]
    assert set(dp.non_tensor_batch) == {"src", "idx"}
    assert dp.non_tensor_batch["idx"].tolist() == [7, 8]
    assert dp.meta_info == {"validate": True}
    with pytest.raises(TypeError, match="'temperature'.*meta_info"):
        DataProto.from_single_dict({"x": torch.zeros(2), "temperature": 0.7})


# -- keys --------------------------------------------------------------------------------------------------------


def test_select_subsets_and_copies():
    dp = make(3, meta={"temperature": 1.0, "do_sample": True})
    sub = dp.select(batch_keys=["obs"], non_tensor_batch_keys=[], meta_info_keys=["do_sample"])
    assert list(sub.batch.keys()) == ["obs"] and sub.non_tensor_batch == {} and sub.meta_info == {"do_sample": True}
    assert len(sub) == 3

    shared = dp.select()
    shared.batch["new"] = torch.zeros(3)  # key edits on the result leave the source alone
    assert "new" not in dp.batch.keys()
    shared.batch["act"][0] = 99.0  # without deepcopy the tensors are shared
    assert dp.batch["act"][0].item() == 99.0

    deep = dp.select(batch_keys=["act"], deepcopy=True)
    deep.batch["act"][1] = -5.0
    assert dp.batch["act"][1].item() == 1.0

    with pytest.raises(KeyError, match="missing"):
        dp.select(batch_keys=["missing"])
    with pytest.raises(KeyError, match="nope"):
        dp.select(non_tensor_batch_keys=["nope"])


def test_pop_removes_from_self():
    dp = make(3, meta={"temperature": 1.0, "global_steps": 4})
    popped = dp.pop(batch_keys=["act"], non_tensor_batch_keys=["uid"], meta_info_keys=["global_steps"])
    assert list(dp.batch.keys()) == ["obs"] and dp.non_tensor_batch == {} and dp.meta_info == {"temperature": 1.0}
    assert popped.batch["act"].tolist() == [0.0, 1.0, 2.0]
    assert popped.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u2"]
    assert popped.meta_info == {"global_steps": 4} and len(popped) == 3
    with pytest.raises(KeyError, match="act"):
        dp.pop(batch_keys=["act"])
    with pytest.raises(KeyError, match="ghost"):  # a bad key leaves self unchanged
        dp.pop(batch_keys=["obs"], meta_info_keys=["ghost"])
    assert list(dp.batch.keys()) == ["obs"]


def test_rename_batch_and_non_tensor_keys():
    dp = make(2)
    assert dp.rename("obs", "observation") is dp
    dp.rename(["act", "uid"], ["action", "id"])
    assert set(dp.batch.keys()) == {"observation", "action"}
    assert dp.non_tensor_batch["id"].tolist() == ["u0", "u1"]
    with pytest.raises(ValueError, match="as many"):
        dp.rename(["a", "b"], ["c"])
    with pytest.raises(KeyError, match="ghost"):
        dp.rename("ghost", "x")


def test_union_merges_and_accepts_equal_shared_keys():
    a = make(2, meta={"temperature": 1.0})
    b = DataProto.from_dict(
        {"act": torch.tensor([0.0, 1.0]), "reward": torch.tensor([0.5, -0.5])},
        non_tensors={"uid": ["u0", "u1"], "src": ["x", "y"]},
        meta_info={"temperature": 1.0, "validate": False},
    )
    out = a.union(b)
    assert out is a
    assert set(a.batch.keys()) == {"obs", "act", "reward"}
    assert a.batch["reward"].tolist() == [0.5, -0.5]
    assert a.non_tensor_batch["src"].tolist() == ["x", "y"]
    assert a.meta_info == {"temperature": 1.0, "validate": False}

    # a DataProto without tensors takes the other's tensors
    c = DataProto.from_dict(non_tensors={"uid": ["u0", "u1"]}).union(make(2))
    assert c.batch["act"].tolist() == [0.0, 1.0]


def test_union_conflicts_name_the_key():
    with pytest.raises(ValueError, match="'act'"):
        make(2).union(DataProto.from_dict({"act": torch.tensor([0.0, 7.0])}))
    with pytest.raises(ValueError, match="'uid'"):
        make(2).union(DataProto.from_dict(non_tensors={"uid": ["u0", "other"]}))
    with pytest.raises(ValueError, match="'temperature'"):
        make(2).union(DataProto(meta_info={"temperature": 0.5}))
    with pytest.raises(ValueError, match="different lengths"):
        make(2).union(make(3))


def test_union_helpers_compare_object_arrays_elementwise():
    nested_a = {"info": np.array([{"k": [1, 2]}, {"k": [3]}], dtype=object)}
    nested_b = {"info": np.array([{"k": [1, 2]}, {"k": [3]}], dtype=object), "nan": np.array([float("nan")], dtype=object)}
    assert set(union_numpy_dict(nested_a, nested_b)) == {"info", "nan"}
    with pytest.raises(ValueError, match="'info'"):
        union_numpy_dict(nested_a, {"info": np.array([{"k": [1, 2]}, {"k": [4]}], dtype=object)})
    with pytest.raises(AssertionError, match="`info` in tensor_dict1 and tensor_dict2 are not the same object"):
        union_numpy_dict(nested_a, {"info": np.array([{"k": [1, 2]}, {"k": [5]}], dtype=object)})
    td = TensorDict({"x": torch.ones(2)}, batch_size=[2])
    with pytest.raises(ValueError, match="different sizes"):
        union_tensor_dict(td, TensorDict({"y": torch.ones(3)}, batch_size=[3]))


# -- indexing ------------------------------------------------------------------------------------------------------


def test_int_index_returns_one_row():
    dp = make(4)
    item = dp[2]
    assert isinstance(item, DataProtoItem)
    assert item.batch["obs"].tolist() == [2, 20] and item.batch.batch_size == torch.Size([])
    assert item.non_tensor_batch == {"uid": "u2"} and item.meta_info == {"temperature": 1.0}
    assert dp[-1].non_tensor_batch["uid"] == "u3"
    assert dp[np.int64(1)].non_tensor_batch["uid"] == "u1"
    with pytest.raises(IndexError, match="4 rows"):
        dp[4]


def test_slice_list_array_tensor_and_mask_indexing():
    dp = make(5)
    assert rows(dp[1:4]) == [1, 2, 3] and dp[1:4].non_tensor_batch["uid"].tolist() == ["u1", "u2", "u3"]
    assert rows(dp[::2]) == [0, 2, 4]
    assert rows(dp.slice(3)) == [3, 4]
    assert rows(dp[[4, 0, 0]]) == [4, 0, 0]
    assert dp[[4, 0, 0]].non_tensor_batch["uid"].tolist() == ["u4", "u0", "u0"]
    assert rows(dp[np.array([1, -1])]) == [1, 4]
    assert rows(dp[torch.tensor([3, 2])]) == [3, 2]
    mask = [True, False, False, True, True]
    assert rows(dp[mask]) == [0, 3, 4] and dp[np.array(mask)].non_tensor_batch["uid"].tolist() == ["u0", "u3", "u4"]
    assert len(dp[[]]) == 0
    with pytest.raises(IndexError, match="mask has 2"):
        dp[[True, False]]
    with pytest.raises(IndexError, match="out of range"):
        dp[[0, 5]]
    with pytest.raises(TypeError):
        dp["obs"]


# -- splitting and joining --------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(chunks=st.integers(1, 6), per_chunk=st.integers(0, 5))
def test_chunk_then_concat_round_trips(chunks: int, per_chunk: int):
    dp = make(chunks * per_chunk)
    parts = dp.chunk(chunks)
    assert [len(p) for p in parts] == [per_chunk] * chunks
    assert_dp_equal(DataProto.concat(parts), dp)


def test_chunk_splits_in_order():
    parts = make(6).chunk(3)
    assert [rows(p) for p in parts] == [[0, 1], [2, 3], [4, 5]]
    assert [p.non_tensor_batch["uid"].tolist() for p in parts] == [["u0", "u1"], ["u2", "u3"], ["u4", "u5"]]


def test_chunk_non_divisible_errors_with_numbers():
    with pytest.raises(ValueError, match=r"length 5 .*chunks=2.*pad_dataproto_to_divisor"):
        make(5).chunk(2)


def test_split_leaves_remainder_last():
    parts = make(5).split(2)
    assert [rows(p) for p in parts] == [[0, 1], [2, 3], [4]]


def test_concat_meta_from_first_and_key_checks():
    out = DataProto.concat([make(2, meta={"temperature": 1.0}), make(1, meta={"temperature": 0.1})])
    assert rows(out) == [0, 1, 0] and out.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u0"]
    assert out.meta_info == {"temperature": 1.0}
    with pytest.raises(ValueError, match="'act'"):
        DataProto.concat([make(2), make(2).select(batch_keys=["obs"])])
    with pytest.raises(ValueError, match="uid"):
        DataProto.concat([make(2), make(2).select(non_tensor_batch_keys=[])])
    with pytest.raises(ValueError, match="at least one"):
        DataProto.concat([])


def test_repeat_interleaved_and_tiled():
    dp = make(2)
    inter = dp.repeat(repeat_times=2, interleave=True)
    assert rows(inter) == [0, 0, 1, 1]
    assert inter.batch["act"].tolist() == [0.0, 0.0, 1.0, 1.0]
    assert inter.non_tensor_batch["uid"].tolist() == ["u0", "u0", "u1", "u1"]
    tiled = dp.repeat(repeat_times=3, interleave=False)
    assert rows(tiled) == [0, 1, 0, 1, 0, 1]
    assert tiled.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u0", "u1", "u0", "u1"]
    assert tiled.meta_info == {"temperature": 1.0}


def test_sample_level_repeat():
    out = make(3).sample_level_repeat([2, 0, 1])
    assert rows(out) == [0, 0, 2] and out.non_tensor_batch["uid"].tolist() == ["u0", "u0", "u2"]


def test_reorder_in_place():
    dp = make(3)
    assert dp.reorder(torch.tensor([2, 0, 1])) is None
    assert rows(dp) == [2, 0, 1] and dp.non_tensor_batch["uid"].tolist() == ["u2", "u0", "u1"]


def test_to_cpu():
    dp = make(2)
    assert dp.to("cpu") is dp
    assert dp.batch.device == torch.device("cpu") and dp.batch["obs"].device.type == "cpu"


def test_collate_fn_stacks_rows_back():
    dp = make(3)
    assert_dp_equal(collate_fn([dp[i] for i in range(3)]), dp)


# -- iteration ---------------------------------------------------------------------------------------------------


def test_make_iterator_in_order_for_each_epoch():
    batches = list(make(4).make_iterator(mini_batch_size=2, epochs=3))
    assert [rows(b) for b in batches] == [[0, 1], [2, 3]] * 3
    assert all(b.meta_info == {"temperature": 1.0} for b in batches)


def test_make_iterator_shuffle_is_seeded():
    dp = make(16)

    def order(seed: int) -> list[list[int]]:
        return [rows(b) for b in dp.make_iterator(4, epochs=2, seed=seed, dataloader_kwargs={"shuffle": True})]

    first = order(seed=1)
    assert len(first) == 8  # 2 epochs x 16/4 mini-batches
    assert first == order(seed=1)
    assert first != order(seed=2)
    for epoch in (first[:4], first[4:]):  # each epoch visits every row once
        assert sorted(r for b in epoch for r in b) == list(range(16))
    assert first[:4] != first[4:]  # a fresh permutation per epoch


def test_make_iterator_argument_errors():
    with pytest.raises(ValueError, match="length 5.*mini_batch_size=2"):
        make(5).make_iterator(mini_batch_size=2, epochs=1)
    with pytest.raises(ValueError, match="num_workers"):
        make(4).make_iterator(2, 1, dataloader_kwargs={"num_workers": 2})


# -- padding -------------------------------------------------------------------------------------------------------


def test_pad_cycles_rows_and_unpad_restores():
    dp = make(5)
    padded, pad = pad_dataproto_to_divisor(dp, 4)
    assert pad == 3 and rows(padded) == [0, 1, 2, 3, 4, 0, 1, 2]
    assert_dp_equal(unpad_dataproto(padded, pad), dp)

    small = make(2)
    padded, pad = pad_dataproto_to_divisor(small, 7)  # pad longer than the data: cycle
    assert pad == 5 and rows(padded) == [0, 1, 0, 1, 0, 1, 0]
    assert padded.non_tensor_batch["uid"].tolist() == ["u0", "u1", "u0", "u1", "u0", "u1", "u0"]
    assert_dp_equal(unpad_dataproto(padded, pad), small)

    same, pad = pad_dataproto_to_divisor(make(4), 2)
    assert pad == 0 and rows(same) == [0, 1, 2, 3]
    assert rows(unpad_dataproto(same, 0)) == [0, 1, 2, 3]


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 9), divisor=st.integers(1, 8))
def test_pad_chunk_concat_unpad_round_trips(n: int, divisor: int):
    dp = make(n)
    padded, pad = pad_dataproto_to_divisor(dp, divisor)
    assert len(padded) % divisor == 0 and 0 <= pad < divisor
    assert_dp_equal(unpad_dataproto(DataProto.concat(padded.chunk(divisor)), pad), dp)


# -- persistence ---------------------------------------------------------------------------------------------------


def test_pickle_round_trip():
    dp = make(3, meta={"temperature": 0.7, "metrics": {"loss": [1.0]}})
    dp.non_tensor_batch["reward_model"] = np.array([{"ground_truth": str(i)} for i in range(3)], dtype=object)
    back = pickle.loads(pickle.dumps(dp))
    assert_dp_equal(back, dp)
    assert back.non_tensor_batch["reward_model"][2] == {"ground_truth": "2"}
    assert back.batch.batch_size == torch.Size([3])


def test_save_and_load_round_trip(tmp_path):
    dp = make(3, meta={"global_steps": 2})
    target = tmp_path / "sub" / "batch.pt"
    dp.save_to_disk(target)
    assert_dp_equal(DataProto.load_from_disk(target), dp)
    assert os.listdir(target.parent) == ["batch.pt"]  # no temp file left behind
    torch.save({"not": "a DataProto"}, tmp_path / "other.pt")
    with pytest.raises(TypeError, match="other.pt"):
        DataProto.load_from_disk(tmp_path / "other.pt")


def test_info_and_size_strings(capsys):
    dp = make(2)
    info = dp.get_data_info()
    assert "2 rows" in info and "batch.obs: shape=[2, 2]" in info and "non_tensor_batch.uid" in info
    assert "size of tensors" in dp.print_size() and "size of tensors" in capsys.readouterr().out


# -- DataProtoFuture (one small Ray test) ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    import ray

    ray.init(
        num_cpus=1,
        include_dashboard=False,
        object_store_memory=100 * 2**20,
        _temp_dir=str(tmp_path_factory.mktemp("ray")),
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()


def test_dataproto_future_collects_and_dispatches(local_ray):
    ray = local_ray

    @ray.remote
    def produce(start: int, n: int) -> DataProto:
        # self-contained: the worker cannot import this test module, only verl
        ids = torch.arange(start, start + n)
        return DataProto.from_dict(
            {"obs": torch.stack([ids, 10 * ids], dim=1), "act": ids.float()},
            non_tensors={"uid": [f"u{i}" for i in ids.tolist()]},
            meta_info={"temperature": 1.0},
        )

    futures = [produce.remote(0, 2), produce.remote(2, 2)]
    whole = DataProtoFuture.concat(futures)
    assert_dp_equal(whole.get(), make(4))
    halves = whole.chunk(2)
    assert [rows(h.get()) for h in halves] == [[0, 1], [2, 3]]
    quarters = halves[1].chunk(2)  # chunking a chunk composes
    assert [rows(q.get()) for q in quarters] == [[2], [3]]
    # a future itself travels through Ray (cloudpickle), as the single controller passes it to workers
    assert rows(ray.get(ray.put(halves[0])).get()) == [0, 1]


def test_union_compares_self_referencing_object_arrays():
    # an object array that holds itself: two such cycles of the same shape are equal, and no RecursionError
    first, second = np.array([None], dtype=object), np.array([None], dtype=object)
    first[0], second[0] = first, second
    assert set(union_numpy_dict({"data": first}, {"data": second})) == {"data"}
    looped = np.array([None, 1], dtype=object)
    looped[0] = looped
    other = np.array([None, 2], dtype=object)
    other[0] = other
    with pytest.raises(AssertionError, match="`data` in tensor_dict1"):
        union_numpy_dict({"data": looped}, {"data": other})
