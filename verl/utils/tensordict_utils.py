"""Helpers for using a plain ``tensordict.TensorDict`` as the batch (upstream verl's ``tensordict_utils``, ``tu``).

Conventions, as upstream: tensors (dense or nested/jagged) are per-row entries; a per-row list of Python objects
is a ``NonTensorStack`` (one ``NonTensorData`` per row); a batch-wide value (what ``DataProto.meta_info`` holds) is
a single ``NonTensorData``. ``get``/``pop`` unwrap them again: a stack to its list, a datum to its value.
Preconditions that upstream asserts raise AssertionError here too, with a message that names the key.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

__all__ = [
    "assert_tensordict_eq",
    "assign_non_tensor",
    "assign_non_tensor_dict",
    "assign_non_tensor_data",
    "assign_non_tensor_stack",
    "concat_nested_tensors",
    "concat_tensordict",
    "get",
    "get_keys",
    "get_non_tensor_data",
    "get_tensordict",
    "index_select_tensor_dict",
    "make_iterator",
    "pad_to_divisor",
    "pop",
    "pop_keys",
    "union_tensor_dict",
    "unpad",
    "unwrap_non_tensor_data",
]

logger = logging.getLogger(__name__)


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _stack(values: Iterable[Any]) -> NonTensorStack:
    return NonTensorStack.from_list([NonTensorData(v) for v in values])


def assign_non_tensor_data(tensor_dict: TensorDict, key: str, val: Any) -> None:
    """Store one batch-wide value under ``key``."""
    _require(isinstance(tensor_dict, TensorDict), f"assign_non_tensor_data needs a TensorDict, got {type(tensor_dict).__name__}")
    tensor_dict[key] = NonTensorData(val)


def assign_non_tensor_stack(tensor_dict: TensorDict, key: str, val: list) -> None:
    """Store a per-row list (items may be lists, dicts, strings...) under ``key``."""
    _require(isinstance(tensor_dict, TensorDict), f"assign_non_tensor_stack needs a TensorDict, got {type(tensor_dict).__name__}")
    tensor_dict[key] = _stack(val)


def assign_non_tensor_dict(tensor_dict: TensorDict, non_tensor_dict: dict) -> TensorDict:
    """Store every item of ``non_tensor_dict`` as a batch-wide value (``NonTensorData``); returns ``tensor_dict``."""
    for key, val in non_tensor_dict.items():
        assign_non_tensor_data(tensor_dict, key, val)
    return tensor_dict


def assign_non_tensor(tensor_dict: TensorDict, **kwargs: Any) -> TensorDict:
    """Store each keyword: a list as a per-row stack, a NonTensorData/NonTensorStack as given, anything else as
    one batch-wide value. Returns ``tensor_dict``."""
    _require(isinstance(tensor_dict, TensorDict), f"assign_non_tensor needs a TensorDict, got {type(tensor_dict).__name__}")
    for key, val in kwargs.items():
        if isinstance(val, (NonTensorData, NonTensorStack)):
            tensor_dict[key] = val
        elif isinstance(val, list):
            assign_non_tensor_stack(tensor_dict, key, val)
        else:
            assign_non_tensor_data(tensor_dict, key, val)
    return tensor_dict


def unwrap_non_tensor_data(data: Any) -> Any:
    """The value inside a NonTensorData; anything else unchanged."""
    return data.data if isinstance(data, NonTensorData) else data


def get_non_tensor_data(data: TensorDict, key: str, default: Any) -> Any:
    return unwrap_non_tensor_data(data.get(key, default))


def _rows(key: str, value: Any) -> int:
    return value.size(0) if isinstance(value, torch.Tensor) else len(value)


def get_tensordict(tensor_dict: dict[str, Any], non_tensor_dict: dict | None = None) -> TensorDict:
    """A TensorDict with batch_size [N] from per-row tensors and lists, plus batch-wide ``non_tensor_dict`` values.

    Lists become NonTensorStacks (so nested lists and dicts per row work); a list may not hold tensors (convert
    them to numpy first). Every per-row entry must have the same N; with none, batch_size is [].
    """
    source: dict[str, Any] = {}
    batch_size, first = None, None
    for key, val in tensor_dict.items():
        if isinstance(val, list):
            _require(not any(isinstance(v, torch.Tensor) for v in val),
                     f"get_tensordict: list {key!r} holds tensors; a list becomes a NonTensorStack, so convert them "
                     f"to numpy first or pass one (nested) tensor")
            val = _stack(val)
        elif isinstance(val, torch.Tensor) and val.is_nested:
            _require(val.is_contiguous(), f"get_tensordict: nested tensor {key!r} is not contiguous; build it with layout=torch.jagged")
        _require(isinstance(val, (torch.Tensor, NonTensorStack)),
                 f"get_tensordict: {key!r} is a {type(val).__name__}; per-row entries are tensors or lists "
                 f"(batch-wide values go in non_tensor_dict)")
        rows = _rows(key, val)
        if batch_size is None:
            batch_size, first = rows, key
        _require(rows == batch_size, f"get_tensordict: {key!r} has {rows} rows but {first!r} has {batch_size}")
        source[key] = val
    for key, val in (non_tensor_dict or {}).items():
        _require(key not in source, f"get_tensordict: {key!r} is both a per-row entry and a batch-wide value")
        source[key] = NonTensorData(val)
    return TensorDict(source, batch_size=[] if batch_size is None else [batch_size])


def concat_nested_tensors(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One jagged nested tensor with the rows of every (2-D, contiguous, nested) tensor, in order."""
    rows: list[torch.Tensor] = []
    for i, tensor in enumerate(tensors):
        _require(tensor.is_nested and tensor.is_contiguous() and tensor.dim() == 2,
                 f"concat_nested_tensors: tensor {i} must be a contiguous 2-D nested tensor")
        rows.extend(tensor.unbind(0))
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def _is_nested(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_nested


def concat_tensordict(data: list[TensorDict]) -> TensorDict:
    """Rows of every TensorDict in order: tensors concatenated, nested tensors row by row, per-row lists joined;
    batch-wide values from the first (as upstream). The inputs are left untouched."""
    _require(len(data) > 0, "concat_tensordict needs at least one TensorDict")
    keys = set(data[0].keys())
    for i, td in enumerate(data):
        _require(set(td.keys()) == keys, f"concat_tensordict: part {i} keys differ from part 0 by "
                                         f"{sorted(keys.symmetric_difference(td.keys()))}")
    out: dict[str, Any] = {}
    for key in data[0].keys():
        values = [td.get(key) for td in data]
        head = values[0]
        if isinstance(head, NonTensorStack):
            out[key] = _stack([item for value in values for item in value.tolist()])
        elif isinstance(head, NonTensorData):
            out[key] = head
        elif _is_nested(head):
            out[key] = concat_nested_tensors(values)
        else:
            out[key] = torch.cat(values, dim=0)
    return TensorDict(out, batch_size=[sum(len(td) for td in data)], device=data[0].device)


def index_select_tensor_dict(batch: TensorDict | None, indices: torch.Tensor | list[int]) -> TensorDict | None:
    """Rows ``indices`` (1-D) of every entry; nested tensors and stacks are indexed row by row, batch-wide values
    kept."""
    if batch is None:
        return None
    indices = torch.as_tensor(indices)
    _require(indices.dim() == 1, f"index_select_tensor_dict: indices must be 1-D, got shape {list(indices.shape)}")
    picked: dict[str, Any] = {}
    for key in batch.keys():
        value = batch.get(key)
        if _is_nested(value):
            picked[key] = torch.nested.as_nested_tensor([value[int(i)] for i in indices], layout=torch.jagged)
        elif isinstance(value, NonTensorData):
            picked[key] = value
        else:
            picked[key] = value[indices]
    return TensorDict(picked, batch_size=[indices.shape[0]])


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    return a == b


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add tensor_dict2's entries to tensor_dict1 (in place); a shared key must hold equal values."""
    _require(tensor_dict1.batch_size == tensor_dict2.batch_size,
             f"union_tensor_dict: batch sizes differ: {list(tensor_dict1.batch_size)} vs {list(tensor_dict2.batch_size)}")
    for key in tensor_dict2.keys():
        if key in tensor_dict1.keys():
            _require(_equal(get(tensor_dict1, key), get(tensor_dict2, key)),
                     f"union_tensor_dict: {key!r} differs between the two TensorDicts")
        else:
            tensor_dict1[key] = tensor_dict2.get(key)
    return tensor_dict1


def make_iterator(
    tensordict: TensorDict, mini_batch_size: int, epochs: int, seed: int | None = None, dataloader_kwargs: dict | None = None
) -> Iterator[TensorDict]:
    """Mini-batches of ``mini_batch_size`` rows for ``epochs`` passes, through a torch DataLoader
    (``dataloader_kwargs`` such as shuffle go to it; ``seed`` fixes its shuffling)."""
    from torch.utils.data import DataLoader

    _require(len(tensordict) % mini_batch_size == 0,
             f"make_iterator: {len(tensordict)} rows are not divisible by mini_batch_size={mini_batch_size}")
    generator = torch.Generator().manual_seed(seed) if seed is not None else None
    loader = DataLoader(tensordict, batch_size=mini_batch_size, collate_fn=_identity, generator=generator,
                        **(dataloader_kwargs or {}))
    return (batch for _ in range(epochs) for batch in loader)


def _identity(batch: Any) -> Any:
    return batch


def assert_tensordict_eq(tensordict1: TensorDict, tensordict2: TensorDict) -> None:
    """Raise AssertionError naming the first key whose value differs (nested tensors compared row by row)."""
    keys1, keys2 = set(tensordict1.keys()), set(tensordict2.keys())
    _require(keys1 == keys2, f"key sets differ: only in first {sorted(keys1 - keys2)}, only in second {sorted(keys2 - keys1)}")
    for key in tensordict1.keys():
        a, b = tensordict1[key], tensordict2[key]
        _require(type(a) is type(b), f"{key!r}: types differ ({type(a).__name__} vs {type(b).__name__})")
        if _is_nested(a):
            rows_a, rows_b = a.unbind(), b.unbind()
            _require(len(rows_a) == len(rows_b) and all(_equal(x, y) for x, y in zip(rows_a, rows_b)),
                     f"{key!r}: nested tensors differ")
        else:
            _require(_equal(a, b), f"{key!r}: values differ")


def _unwrapped(value: Any) -> Any:
    if isinstance(value, NonTensorStack):
        return value.tolist()
    return unwrap_non_tensor_data(value)


def get(tensordict: TensorDict, key: str, default: Any = None) -> Any:
    """The entry under ``key`` unwrapped (tensor, list for a stack, value for a datum), or ``default``."""
    return _unwrapped(tensordict.get(key)) if key in tensordict.keys() else default


def pop(tensordict: TensorDict, key: str | Iterable[str] | None = None, default: Any = None, *,
        keys: Iterable[str] | None = None) -> Any:
    """Upstream's form ``pop(td, keys=[...])`` (or a list as ``key``): remove those keys and return them as a new
    TensorDict, as :func:`pop_keys`. With one key name: remove it and return it unwrapped, or ``default``."""
    if keys is not None or (key is not None and not isinstance(key, str)):
        _require(keys is None or key is None, "pop: pass either key or keys, not both")
        return pop_keys(tensordict, key if keys is None else keys)
    _require(key is not None, "pop: name a key (or keys=[...])")
    return _unwrapped(tensordict.pop(key)) if key in tensordict.keys() else default


def _split_keys(tensordict: TensorDict, keys: Iterable[str], remove: bool) -> TensorDict:
    per_row, batch_wide = {}, {}
    keys = list(keys)
    missing = [k for k in keys if k not in tensordict.keys()]
    if missing:
        raise KeyError(f"keys {missing} not in the TensorDict; it has {sorted(tensordict.keys())}")
    for key in keys:
        value = tensordict.pop(key) if remove else tensordict.get(key)
        (batch_wide if isinstance(value, NonTensorData) else per_row)[key] = _unwrapped(value)
    return get_tensordict(per_row, batch_wide)


def get_keys(tensordict: TensorDict, keys: Iterable[str]) -> TensorDict:
    """A new TensorDict with only ``keys`` (KeyError naming any missing)."""
    return _split_keys(tensordict, keys, remove=False)


def pop_keys(tensordict: TensorDict, keys: Iterable[str]) -> TensorDict:
    """Remove ``keys`` and return them as a new TensorDict (KeyError naming any missing, nothing removed then)."""
    return _split_keys(tensordict, keys, remove=True)


def pad_to_divisor(data: TensorDict, size_divisor: int) -> tuple[TensorDict, int]:
    """Pad to a multiple of ``size_divisor`` by repeating rows from the start (cycling); (padded, pad_size)."""
    _require(isinstance(data, TensorDict), f"pad_to_divisor needs a TensorDict, got {type(data).__name__}")
    n = len(data)
    pad_size = (-n) % size_divisor
    if pad_size == 0:
        if n == 0:
            logger.warning("pad_to_divisor: the TensorDict has no rows; nothing padded")
        return data, 0
    return concat_tensordict([data, index_select_tensor_dict(data, torch.arange(pad_size) % n)]), pad_size


def unpad(data: TensorDict, pad_size: int) -> TensorDict:
    """Drop the last ``pad_size`` rows."""
    return data[: len(data) - pad_size] if pad_size else data
