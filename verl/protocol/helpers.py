"""Value, index, iteration and persistence helpers behind ``verl.protocol.DataProto``.

They never import DataProto (the few that take one only call its methods), so ``verl.protocol`` can import
them without a cycle. ``union_tensor_dict`` and ``union_numpy_dict`` are public verl API and stay importable
from ``verl.protocol``.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

__all__ = [
    "ProtocolAssertionError",
    "atomic_torch_save",
    "chunk_after_dispatch",
    "concat_meta_info",
    "existing_keys",
    "index_tensor",
    "iterate_mini_batches",
    "to_object_array",
    "union_meta_info",
    "union_numpy_dict",
    "union_tensor_dict",
    "values_equal",
]


class ProtocolAssertionError(AssertionError, ValueError):
    """A DataProto precondition that failed: a conflicting union, an uneven chunk, a batch of more than one dim.

    Upstream verl raises AssertionError there, so code written against it catches this; it is a ValueError too,
    so callers that catch ValueError (our earlier type) keep working. The message names what was wrong.
    """


def to_object_array(key: str, value: Any) -> np.ndarray:
    """Per-row values as an object array whose first dim is the row.

    Lists are filled element by element so equal-length inner lists stay one object per row instead of
    becoming a 2-D array.
    """
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            raise ValueError(f"non_tensor_batch[{key!r}] is a 0-d array; it needs one entry per row")
        return value if value.dtype == object else value.astype(object)
    if isinstance(value, (list, tuple)):
        arr = np.empty(len(value), dtype=object)
        for i, v in enumerate(value):
            arr[i] = v
        return arr
    raise TypeError(
        f"non_tensor_batch[{key!r}] must be a numpy array or a list with one entry per row, got {type(value).__name__}"
    )


def values_equal(a: Any, b: Any, _open: set[tuple[int, int]] | None = None) -> bool:
    """Equality that works for tensors, (object) arrays, containers and NaN (NaN equals NaN: same value).

    Containers that hold themselves (an object array whose element is the array) compare without recursing
    forever: a pair already being compared further up counts as equal, so two same-shaped cycles are equal."""
    if a is b:
        return True
    if isinstance(a, (np.ndarray, dict, list, tuple)):
        pair = (id(a), id(b))
        _open = set() if _open is None else _open
        if pair in _open:
            return True
        _open.add(pair)
        try:
            return _containers_equal(a, b, _open)
        finally:
            _open.discard(pair)
    return _containers_equal(a, b, _open)


def _containers_equal(a: Any, b: Any, _open: set[tuple[int, int]] | None) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)) or a.shape != b.shape:
            return False
        if a.dtype != object and b.dtype != object:
            return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc"))
        return all(values_equal(x, y, _open) for x, y in zip(a.ravel(), b.ravel()))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(values_equal(a[k], b[k], _open) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(values_equal(x, y, _open) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    result = a == b
    return bool(result) if isinstance(result, (bool, np.bool_)) else bool(np.all(result))


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add tensor_dict2's keys into tensor_dict1 (in place); a shared key must hold equal tensors."""
    if tensor_dict1.batch_size != tensor_dict2.batch_size:
        raise ProtocolAssertionError(
            f"cannot union batches of different sizes: {list(tensor_dict1.batch_size)} vs {list(tensor_dict2.batch_size)}"
        )
    for key in tensor_dict2.keys():
        if key in tensor_dict1.keys() and not values_equal(tensor_dict1[key], tensor_dict2[key]):
            raise ProtocolAssertionError(
                f"union conflict on batch key {key!r}: both sides hold it with different values; "
                f"rename or pop one side first"
            )
        tensor_dict1[key] = tensor_dict2[key]
    return tensor_dict1


def union_numpy_dict(dict1: dict[str, np.ndarray], dict2: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add dict2's arrays into dict1 (in place); a shared key must hold elementwise-equal arrays."""
    for key, value in dict2.items():
        if key in dict1 and not values_equal(dict1[key], value):
            raise ProtocolAssertionError(
                f"`{key}` in tensor_dict1 and tensor_dict2 are not the same object. (union conflict on "
                f"non_tensor_batch key {key!r}: both sides hold it with different values; rename or pop one side first)"
            )
        dict1[key] = value
    return dict1


def union_meta_info(meta1: dict, meta2: dict) -> dict:
    for key, value in meta2.items():
        if key in meta1 and not values_equal(meta1[key], value):
            raise ProtocolAssertionError(
                f"union conflict on meta_info key {key!r}: {meta1[key]!r} vs {value!r}; pop one side first"
            )
        meta1[key] = value
    return meta1


def concat_meta_info(metas: list[dict]) -> dict:
    """meta_info of ``DataProto.concat``: every part's ``"metrics"`` (a dict, or a list of dicts, e.g. one per
    rank) gathered into one dict of lists, in part order; every other key from the first part that has it."""
    merged: dict = {}
    metrics: list = []
    for meta in metas:
        for key, value in meta.items():
            if key != "metrics":
                merged.setdefault(key, value)
            elif value is not None:
                metrics.extend(value if isinstance(value, list) else [value])
    if metrics:
        gathered: dict[str, list] = {}
        for entry in metrics:
            if not isinstance(entry, dict):
                raise TypeError(f"meta_info['metrics'] entries must be dicts of metric values, got {type(entry).__name__}")
            for name, value in entry.items():
                gathered.setdefault(name, []).append(value)
        merged["metrics"] = gathered
    return merged


def existing_keys(keys: Any, available: Any, part: str) -> list[str]:
    """``keys`` (all of ``available`` when None), raising KeyError naming any that are missing."""
    available = list(available)
    if keys is None:
        return available
    missing = [k for k in keys if k not in available]
    if missing:
        raise KeyError(f"{part} has no key(s) {missing}; available: {sorted(available)}")
    return list(keys)


def index_tensor(idxs: Any, length: int) -> torch.Tensor:
    """Row indices (int64, non-negative) from a list / array / tensor of ints or a boolean mask."""
    t = idxs if isinstance(idxs, torch.Tensor) else torch.as_tensor(np.asarray(idxs))
    t = t.reshape(-1).cpu()
    if t.dtype == torch.bool:
        if t.numel() != length:
            raise IndexError(f"boolean mask has {t.numel()} entries but the DataProto has {length} rows")
        return t.nonzero(as_tuple=True)[0]
    if t.numel() == 0:
        return t.long()
    if t.is_floating_point() or t.is_complex():
        raise TypeError(f"row indices must be integers or a boolean mask, got dtype {t.dtype}")
    t = t.long()
    if bool(((t < -length) | (t >= length)).any()):
        raise IndexError(f"row index out of range for a DataProto of {length} rows: {t.tolist()}")
    return torch.where(t < 0, t + length, t)


def atomic_torch_save(obj: Any, filepath: str | os.PathLike, prefix: str = ".tmp-") -> None:
    """``torch.save`` through a temp file in the same folder, then a rename, so a crash never leaves half a file."""
    filepath = os.fspath(filepath)
    folder = os.path.dirname(os.path.abspath(filepath))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
        os.replace(tmp, filepath)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def chunk_after_dispatch(data: Any, i: int, chunks: int, previous: Callable | None = None) -> Any:
    """The i-th of ``chunks`` parts of a DataProto, after the earlier dispatch.

    Module level (not a lambda or closure) so a DataProtoFuture carrying it still pickles across Ray.
    """
    if previous is not None:
        data = previous(data)
    return data.chunk(chunks=chunks)[i]


def iterate_mini_batches(
    data: Any, mini_batch_size: int, epochs: int, shuffle: bool, generator: torch.Generator
) -> Iterator[Any]:
    """The one mini-batch iterator: behind ``DataProto.make_iterator`` and the actor/critic update loop.

    With ``shuffle`` every epoch draws a new permutation from the one ``generator``, so a seed fixes the
    whole sequence of mini-batches, not just the first epoch. When ``mini_batch_size`` does not divide the
    length (``make_iterator`` refuses that; the update loop allows it) each epoch ends with a smaller one.
    """
    n = len(data)
    for _ in range(epochs):
        if shuffle:
            order = torch.randperm(n, generator=generator)
            for i in range(0, n, mini_batch_size):
                yield data.select_idxs(order[i : i + mini_batch_size])
        else:
            yield from data.split(mini_batch_size)
