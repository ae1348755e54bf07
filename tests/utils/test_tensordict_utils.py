"""verl.utils.tensordict_utils (upstream's ``tu``): a plain TensorDict as the batch."""

import copy

import pytest
import torch
from tensordict import NonTensorData, NonTensorStack

from verl.utils import tensordict_utils as tu


def sample():
    return tu.get_tensordict(
        {"obs": torch.tensor([[1, 2], [3, 4], [5, 6]]), "labels": ["a", ["b"], []]}, non_tensor_dict={"info": "x"}
    )


def test_get_tensordict_rows_lists_and_batch_wide_values():
    td = sample()
    assert td.batch_size == torch.Size([3])
    assert td[0]["obs"].tolist() == [1, 2] and td[0]["labels"] == "a"
    assert td[0:2]["labels"] == ["a", ["b"]]
    assert td["info"] == "x"
    assert tu.get_tensordict({}, non_tensor_dict={"info": 1}).batch_size == torch.Size([])
    with pytest.raises(AssertionError, match="'b' has 2 rows but 'a' has 3"):
        tu.get_tensordict({"a": torch.zeros(3), "b": [1, 2]})
    with pytest.raises(AssertionError, match="holds tensors"):
        tu.get_tensordict({"a": [torch.zeros(1)]})
    with pytest.raises(AssertionError, match="both"):
        tu.get_tensordict({"a": [1]}, non_tensor_dict={"a": 2})


def test_get_pop_and_key_subsets():
    td = sample()
    assert tu.get(td, "info") == "x" and tu.get(td, "labels") == ["a", ["b"], []]
    assert tu.get(td, "missing", default=5) == 5
    subset = tu.get_keys(td, ["obs", "info"])
    assert set(subset.keys()) == {"obs", "info"} and subset["info"] == "x" and "labels" in td.keys()
    with pytest.raises(KeyError, match="nope"):
        tu.get_keys(td, ["obs", "nope"])
    popped = tu.pop_keys(td, ["obs", "info"])
    assert set(popped.keys()) == {"obs", "info"} and set(td.keys()) == {"labels"}
    assert tu.pop(td, "labels") == ["a", ["b"], []] and tu.pop(td, "labels", default=0) == 0


def test_assign_non_tensor_kinds():
    td = tu.get_tensordict({"obs": torch.zeros(3, 1)})
    tu.assign_non_tensor(td, top_p=0.8, turns=[[], [0.5], [0.9, 1.0]], wrapped=NonTensorData(3),
                         stack=NonTensorStack.from_list([NonTensorData(v) for v in (1, 2, 3)]))
    assert td["top_p"] == 0.8 and td["wrapped"] == 3 and td["stack"] == [1, 2, 3]
    assert tu.get(td, "turns") == [[], [0.5], [0.9, 1.0]]
    with pytest.raises(RuntimeError):  # a stack of the wrong length
        tu.assign_non_tensor(td, bad=NonTensorStack.from_list([NonTensorData(1)]))
    assert tu.get_non_tensor_data(td, "top_p", None) == 0.8 and tu.unwrap_non_tensor_data(4) == 4


def test_union_and_equality():
    obs = torch.randn(4, 2)
    a = tu.get_tensordict({"obs": obs, "src": ["g"] * 4})
    b = tu.get_tensordict({"obs": obs, "rew": torch.ones(4), "src": ["g"] * 4})
    tu.union_tensor_dict(a, b)
    assert set(a.keys()) == {"obs", "rew", "src"}
    with pytest.raises(AssertionError, match="'obs'"):
        tu.union_tensor_dict(a, tu.get_tensordict({"obs": obs + 1}))
    with pytest.raises(AssertionError, match="'src'"):
        tu.union_tensor_dict(a, tu.get_tensordict({"src": ["m"] + ["g"] * 3}))
    tu.assert_tensordict_eq(a, copy.deepcopy(a))
    changed = copy.deepcopy(a)
    changed["obs"][0, 0] += 1
    with pytest.raises(AssertionError, match="'obs'"):
        tu.assert_tensordict_eq(a, changed)


def jagged(*lengths, start=0):
    return torch.nested.as_nested_tensor([torch.arange(start, start + n) for n in lengths], layout=torch.jagged)


def test_nested_concat_index_and_eq():
    first, second = jagged(2, 3), jagged(1, 4, start=10)
    joined = tu.concat_nested_tensors([first, second])
    assert joined.values().tolist() == [0, 1, 0, 1, 2, 10, 10, 11, 12, 13]
    td1 = tu.get_tensordict({"ids": first, "labels": ["a", "b"]}, non_tensor_dict={"t": 1.0})
    td2 = tu.get_tensordict({"ids": second, "labels": ["c", "d"]}, non_tensor_dict={"t": 2.0})
    keep = copy.deepcopy(td1)
    out = tu.concat_tensordict([td1, td2])
    assert out["labels"] == ["a", "b", "c", "d"] and out["t"] == 1.0 and len(out) == 4
    assert [r.tolist() for r in out["ids"].unbind()] == [[0, 1], [0, 1, 2], [10], [10, 11, 12, 13]]
    tu.assert_tensordict_eq(td1, keep)
    picked = tu.index_select_tensor_dict(out, torch.tensor([3, 0]))
    assert [r.tolist() for r in picked["ids"].unbind()] == [[10, 11, 12, 13], [0, 1]]
    assert picked["labels"] == ["d", "a"] and picked["t"] == 1.0
    with pytest.raises(AssertionError, match="'ids'"):
        tu.assert_tensordict_eq(td1, tu.get_tensordict({"ids": jagged(2, 2), "labels": ["a", "b"]},
                                                         non_tensor_dict={"t": 1.0}))


def test_pad_unpad_and_iterator():
    td = sample()
    padded, pad = tu.pad_to_divisor(td, 7)
    assert pad == 4 and padded["obs"][:, 0].tolist() == [1, 3, 5, 1, 3, 5, 1]
    assert padded["labels"] == ["a", ["b"], [], "a", ["b"], [], "a"] and padded["info"] == "x"
    back = tu.unpad(padded, pad)
    assert back["obs"].tolist() == td["obs"].tolist()
    assert tu.pad_to_divisor(td, 3) == (td, 0)
    batches = list(tu.make_iterator(td, mini_batch_size=1, epochs=2, dataloader_kwargs={"shuffle": False}))
    assert [b["obs"][0, 0].item() for b in batches] == [1, 3, 5, 1, 3, 5]
    order = [[b["obs"][0, 0].item() for b in tu.make_iterator(td, 1, 1, seed=3, dataloader_kwargs={"shuffle": True})]
             for _ in range(2)]
    assert order[0] == order[1] and sorted(order[0]) == [1, 3, 5]
    with pytest.raises(AssertionError):
        tu.make_iterator(td, mini_batch_size=2, epochs=1)


def test_pop_with_keys_as_upstream():
    td = tu.get_tensordict({"obs": torch.arange(4).view(4, 1), "act": torch.zeros(4, 2)}, non_tensor_dict={"a": 1, "b": 2})
    popped = tu.pop(td, keys=["obs", "a"])
    assert set(popped.keys()) == {"obs", "a"} and popped.batch_size[0] == 4 and popped["a"] == 1
    assert set(td.keys()) == {"act", "b"}
    assert set(tu.pop(td, ["act"]).keys()) == {"act"} and set(td.keys()) == {"b"}
    with pytest.raises(AssertionError, match="either key or keys"):
        tu.pop(td, "b", keys=["b"])


def test_assign_non_tensor_dict():
    td = tu.get_tensordict({"obs": torch.zeros(2, 1)})
    assert tu.assign_non_tensor_dict(td, {"temperature": 0.7, "tags": ["x", "y", "z"]}) is td
    assert td["temperature"] == 0.7 and td["tags"] == ["x", "y", "z"]
    assert isinstance(td.get("tags"), NonTensorData)
