"""Upstream verl's DataProto API beyond the basics: auto-padding, the TensorDict bridge, reshapes, byte
serialization, the safe file format, and the exception types upstream's callers catch."""

import os
import pickle

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from verl import DataProto
from verl.protocol import (
    DataProtoConfig,
    deserialize_single_tensor,
    deserialize_tensordict,
    fold_batch_dim,
    serialize_single_tensor,
    serialize_tensordict,
    unfold_batch_dim,
)
from verl.utils import tensordict_utils as tu


@pytest.fixture
def clean_padding_config(monkeypatch):
    monkeypatch.delenv("VERL_AUTO_PADDING", raising=False)
    saved = dict(DataProtoConfig._config)
    DataProtoConfig._config.clear()
    yield
    DataProtoConfig._config.clear()
    DataProtoConfig._config.update(saved)


def rows(n):
    return DataProto.from_dict({"a": torch.arange(n)}, {"na": np.array([str(i) for i in range(n)], dtype=object)})


# -- auto-padding -------------------------------------------------------------------------------------------------


def test_config_switch_env_and_type(clean_padding_config, monkeypatch):
    assert DataProtoConfig.auto_padding is False
    DataProtoConfig.auto_padding = True
    assert DataProtoConfig.auto_padding is True
    DataProtoConfig.auto_padding = False
    for value in ("1", "TRUE", "true"):
        monkeypatch.setenv("VERL_AUTO_PADDING", value)
        assert DataProtoConfig.auto_padding is True
    monkeypatch.setenv("VERL_AUTO_PADDING", "0")
    assert DataProtoConfig.auto_padding is False
    with pytest.raises(AssertionError, match="True or False"):
        DataProtoConfig.auto_padding = 1


def test_uneven_chunk_needs_padding_enabled(clean_padding_config):
    with pytest.raises(AssertionError, match="not divisible by chunks=4"):
        rows(6).chunk(4)
    with pytest.raises(ValueError):  # still a ValueError for callers written against our earlier type
        rows(6).chunk(4)
    # per DataProto: sizes 2, 2, 1, 1 (the first len % chunks parts one longer), rows in order
    parts = DataProto.from_dict({"a": torch.arange(6)}, auto_padding=True).chunk(4)
    assert [p.batch["a"].tolist() for p in parts] == [[0, 1], [2, 3], [4], [5]]
    # process-wide
    DataProtoConfig.auto_padding = True
    assert [len(p) for p in rows(5).chunk(2)] == [3, 2]
    assert rows(5).is_padding_enabled()


def test_from_single_dict_auto_padding_flag_and_subclass():
    class Custom(DataProto):
        pass

    data = Custom.from_single_dict({"x": torch.zeros(3), "s": np.array(["a", "b", "c"], dtype=object)}, auto_padding=True)
    assert type(data) is Custom and data.is_padding_enabled()
    assert type(Custom.concat(data.chunk(3))) is Custom


def test_padding_repeats_last_or_first_row_in_place():
    for size in range(4, 12):
        data = rows(size)
        pad = (-size) % 4
        data.padding(pad)
        assert len(data) == size + pad and len(data) % 4 == 0
        assert data.batch["a"][size:].tolist() == [size - 1] * pad
        assert data.non_tensor_batch["na"][size:].tolist() == [str(size - 1)] * pad
    data = rows(3)
    data.padding(2, padding_candidate="first")
    assert data.batch["a"].tolist() == [0, 1, 2, 0, 0]


# -- upstream's exception types ---------------------------------------------------------------------------------


def test_assertion_errors_where_upstream_asserts():
    obs = torch.randn(10, 4)
    with pytest.raises(AssertionError, match="num_batch_dims"):
        DataProto.from_dict(tensors={"obs": obs, "act": torch.randn(10, 4, 3)}, num_batch_dims=2)
    with pytest.raises(AssertionError, match="num_batch_dims"):
        DataProto.from_dict(tensors={"obs": obs}, num_batch_dims=3)
    with pytest.raises(AssertionError, match="one batch dimension"):
        DataProto(batch=TensorDict({"x": torch.zeros(2, 3)}, batch_size=[2, 3]))
    a = DataProto.from_dict({"obs": obs})
    with pytest.raises(AssertionError, match="'obs'"):
        a.union(DataProto.from_dict({"obs": obs.clone() + 1}))
    with pytest.raises(AssertionError, match="'temperature'"):
        DataProto(meta_info={"temperature": 1.0}).union(DataProto(meta_info={"temperature": 0.5}))


# -- concat gathers metrics -------------------------------------------------------------------------------------


def test_concat_gathers_metrics_per_part():
    parts = [
        DataProto(meta_info={"metrics": {"loss": 1.0, "lr": 0.1}, "temperature": 1.0}),
        DataProto(meta_info={"metrics": {"loss": 3.0, "lr": 0.1}, "temperature": 1.0}),
        DataProto(meta_info={"metrics": [{"loss": 5.0}, {"loss": 7.0}], "extra": "x"}),
    ]
    merged = DataProto.concat(parts)
    assert merged.meta_info == {
        "metrics": {"loss": [1.0, 3.0, 5.0, 7.0], "lr": [0.1, 0.1]},
        "temperature": 1.0,
        "extra": "x",
    }
    plain = DataProto.concat(rows(4).chunk(2))
    assert "metrics" not in plain.meta_info and plain.batch["a"].tolist() == [0, 1, 2, 3]


def test_pad_to_divisor_does_not_gather_metrics_twice():
    from verl.protocol import pad_dataproto_to_divisor

    data = rows(3)
    data.meta_info["metrics"] = {"loss": 2.0}
    padded, pad = pad_dataproto_to_divisor(data, 2)
    assert pad == 1 and padded.meta_info == {"metrics": {"loss": 2.0}}


# -- TensorDict bridge -------------------------------------------------------------------------------------------


def test_to_and_from_tensordict():
    data = DataProto.from_dict(
        {"obs": torch.tensor([1, 2, 3])}, {"labels": ["a", "b", "c"], "turns": [[1], [], [2, 3]]}, {"name": "abc"}
    )
    td = data.to_tensordict()
    assert torch.equal(td["obs"], torch.tensor([1, 2, 3]))
    assert tu.get(td, "labels") == ["a", "b", "c"] and tu.get(td, "turns") == [[1], [], [2, 3]]
    assert td["name"] == "abc"
    back = DataProto.from_tensordict(td)
    assert back.batch["obs"].tolist() == [1, 2, 3]
    assert back.non_tensor_batch["labels"].tolist() == ["a", "b", "c"]
    assert back.non_tensor_batch["turns"].tolist() == [[1], [], [2, 3]]
    assert back.meta_info == {"name": "abc"}
    with pytest.raises(AssertionError):
        DataProto.from_tensordict(td, num_batch_dims=2)


# -- reshapes ----------------------------------------------------------------------------------------------------


def test_unfold_column_chunks_hand_computed():
    obs1 = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
    obs2 = torch.tensor([[10], [20]])
    data = DataProto.from_dict({"obs1": obs1, "obs2": obs2}, {"labels": ["a", "b"]}, {"k": 1})
    out = data.unfold_column_chunks(2, split_keys=["obs1"])
    assert out.batch["obs1"].tolist() == [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert out.batch["obs2"].tolist() == [[10], [10], [20], [20]]
    assert out.non_tensor_batch["labels"].tolist() == ["a", "a", "b", "b"]
    assert out.meta_info == {"k": 1}
    # a non-tensor of per-row lists splits too; a 3-D tensor keeps its trailing dim
    data = DataProto.from_dict({"x": torch.arange(8).reshape(2, 2, 2)}, {"pairs": [["a1", "a2"], ["b1", "b2"]]})
    out = data.unfold_column_chunks(2, split_keys=["x", "pairs"])
    assert out.batch["x"].tolist() == [[[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]]]
    assert out.non_tensor_batch["pairs"].tolist() == [["a1"], ["a2"], ["b1"], ["b2"]]
    # no split keys: every key repeated
    assert rows(2).unfold_column_chunks(3).batch["a"].tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(AssertionError, match="not divisible by n_split=3"):
        DataProto.from_dict({"x": torch.zeros(2, 4)}).unfold_column_chunks(3, split_keys=["x"])


def test_fold_and_unfold_batch_dim():
    data = DataProto.from_dict({"obs": torch.tensor([[1, 2], [3, 4], [5, 6]])}, {"labels": ["a", "b", "c"]}, {"i": 0})
    folded = fold_batch_dim(data.repeat(2, interleave=True), new_batch_size=3)
    assert len(folded) == 3 and folded.batch.batch_size == torch.Size([3])
    assert folded.batch["obs"].tolist() == [[[1, 2], [1, 2]], [[3, 4], [3, 4]], [[5, 6], [5, 6]]]
    assert folded.non_tensor_batch["labels"].tolist() == [["a", "a"], ["b", "b"], ["c", "c"]]
    folded.reorder(torch.tensor([1, 2, 0]))
    flat = unfold_batch_dim(folded, batch_dims=2)
    assert flat.batch["obs"].tolist() == [[3, 4], [3, 4], [5, 6], [5, 6], [1, 2], [1, 2]]
    assert flat.non_tensor_batch["labels"].tolist() == ["b", "b", "c", "c", "a", "a"]
    assert flat.meta_info == {"i": 0}
    with pytest.raises(AssertionError):
        fold_batch_dim(data, new_batch_size=2)


# -- byte serialization ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64, torch.bool, torch.uint8])
def test_single_tensor_round_trip(dtype):
    original = (torch.randn(3, 4, 5) * 10).to(dtype)
    dtype_name, shape, raw = serialize_single_tensor(original)
    assert shape == (3, 4, 5) and isinstance(raw, bytes) and len(raw) == original.numel() * original.element_size()
    back = deserialize_single_tensor((dtype_name, shape, raw))
    assert back.dtype == dtype and torch.equal(back, original)
    for edge in (torch.tensor(42.0), torch.zeros(0, 3)):
        assert torch.equal(deserialize_single_tensor(serialize_single_tensor(edge)), edge)


def test_tensordict_round_trip_with_nested_and_non_tensor_entries():
    nested = torch.nested.as_nested_tensor([torch.randn(2, 3), torch.randn(3, 4), torch.randn(1, 5)])
    jagged = torch.nested.as_nested_tensor([torch.arange(2), torch.arange(4), torch.arange(1)], layout=torch.jagged)
    td = TensorDict({"nested": nested, "jagged": jagged, "regular": torch.randn(3, 4, 5),
                     "half": torch.randn(3).bfloat16()}, batch_size=[3])
    tu.assign_non_tensor(td, labels=["a", "b", "c"], temperature=0.7)
    batch_size, device, items = serialize_tensordict(td)
    assert pickle.loads(pickle.dumps(items)) == items  # plain values only
    back = deserialize_tensordict((batch_size, device, items))
    assert back.batch_size == td.batch_size and set(back.keys()) == set(td.keys())
    assert torch.equal(back["regular"], td["regular"]) and torch.equal(back["half"], td["half"])
    for key in ("nested", "jagged"):
        assert back[key].is_nested and back[key].layout == td[key].layout
        assert all(torch.equal(x, y) for x, y in zip(back[key].unbind(), td[key].unbind()))
    assert tu.get(back, "labels") == ["a", "b", "c"] and tu.get(back, "temperature") == 0.7
    on_device = TensorDict({"x": torch.zeros(2, 3)}, batch_size=[2, 3], device="cpu")
    restored = deserialize_tensordict(serialize_tensordict(on_device))
    assert str(restored.device) == "cpu" and restored.batch_size == torch.Size([2, 3])


# -- the safe file format (issue 35, item 6) ----------------------------------------------------------------------


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_load_from_disk_refuses_a_malicious_pickle(tmp_path):
    marker = tmp_path / "pwned"
    evil = _Evil()
    evil.marker = marker
    path = tmp_path / "evil.pt"
    torch.save({"format": "verl.DataProto/1", "batch": None, "payload": evil}, path)
    with pytest.raises(pickle.UnpicklingError, match="refuses"):
        DataProto.load_from_disk(path)
    assert not marker.exists()
    # a DataProto pickled whole (the old format) is refused too: loading it would need arbitrary unpickling
    old = tmp_path / "old.pt"
    torch.save(rows(2), old)
    with pytest.raises(pickle.UnpicklingError):
        DataProto.load_from_disk(old)


def test_save_and_load_keeps_non_tensor_values(tmp_path):
    non_tensors = {
        "text": ["a", "b"],
        "chat": [[{"role": "user", "content": "hi"}], []],
        "arrays": [np.arange(3, dtype=np.int16), np.array([[1.5]], dtype=np.float32)],
        "scalars": [np.float64(0.25), np.int64(-3)],
        "mixed": [("t", 1, None, True), b"\x00raw"],
    }
    meta = {"global_steps": 3, "shape": (2, 3), "eos": np.array([1, 2]), "names": np.array(["x", "yz"])}
    data = DataProto.from_dict({"x": torch.arange(4.0).reshape(2, 2).bfloat16()}, non_tensors, meta)
    data.save_to_disk(tmp_path / "d.pt")
    back = DataProto.load_from_disk(tmp_path / "d.pt")
    assert torch.equal(back.batch["x"], data.batch["x"]) and back.batch["x"].dtype == torch.bfloat16
    assert back.non_tensor_batch["text"].tolist() == ["a", "b"]
    assert back.non_tensor_batch["chat"].tolist() == [[{"role": "user", "content": "hi"}], []]
    first, second = back.non_tensor_batch["arrays"]
    assert first.dtype == np.int16 and first.tolist() == [0, 1, 2] and second.dtype == np.float32 and second.shape == (1, 1)
    scalars = back.non_tensor_batch["scalars"].tolist()
    assert scalars == [0.25, -3] and type(scalars[0]) is np.float64 and type(scalars[1]) is np.int64
    assert back.non_tensor_batch["mixed"].tolist() == [("t", 1, None, True), b"\x00raw"]
    assert back.meta_info["shape"] == (2, 3) and back.meta_info["eos"].tolist() == [1, 2]
    assert back.meta_info["names"].tolist() == ["x", "yz"]


def test_save_refuses_objects_it_would_have_to_pickle(tmp_path):
    data = DataProto.from_dict(non_tensors={"obj": [object(), object()]})
    with pytest.raises(TypeError, match=r"non_tensor_batch\['obj'\]\[0\]"):
        data.save_to_disk(tmp_path / "x.pt")
    assert not (tmp_path / "x.pt").exists()
