"""Row-shape changes of a DataProto at upstream verl's names: fold rows into groups, unfold them again, and
unfold column chunks into rows.

Each function builds a new object of the caller's class (``type(data)``) and never imports DataProto, so
``verl.protocol`` imports this module without a cycle. The batch keeps one batch dim throughout: a folded
DataProto has ``new_batch_size`` rows whose tensors carry the group as their second dim.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.protocol.helpers import ProtocolAssertionError

__all__ = ["fold_batch_dim", "unfold_batch_dim", "unfold_column_chunks"]


def _rebuild(data: Any, tensors: dict[str, torch.Tensor], non_tensors: dict[str, np.ndarray], rows: int) -> Any:
    batch = None
    if data.batch is not None:
        batch = TensorDict(tensors, batch_size=[rows], device=data.batch.device)
    return type(data)(batch=batch, non_tensor_batch=non_tensors, meta_info=data.meta_info)


def _tensors(data: Any) -> dict[str, torch.Tensor]:
    return dict(data.batch.items()) if data.batch is not None else {}


def fold_batch_dim(data: Any, new_batch_size: int) -> Any:
    """[bsz, ...] -> [new_batch_size, bsz // new_batch_size, ...] for every tensor and non-tensor array: consecutive
    rows become one group (e.g. the ``rollout.n`` responses of one prompt after an interleaved repeat)."""
    n = len(data)
    if new_batch_size < 1 or n % new_batch_size != 0:
        raise ProtocolAssertionError(f"fold_batch_dim: {n} rows cannot fold into {new_batch_size} equal groups")
    group = n // new_batch_size
    tensors = {k: v.reshape(new_batch_size, group, *v.shape[1:]) for k, v in _tensors(data).items()}
    non_tensors = {k: v.reshape(new_batch_size, group, *v.shape[1:]) for k, v in data.non_tensor_batch.items()}
    return _rebuild(data, tensors, non_tensors, new_batch_size)


def unfold_batch_dim(data: Any, batch_dims: int = 2) -> Any:
    """The inverse of ``fold_batch_dim``: the first ``batch_dims`` dims of every entry become one row dim."""
    if batch_dims < 1:
        raise ProtocolAssertionError(f"unfold_batch_dim: batch_dims must be >= 1, got {batch_dims}")
    tensors = {k: v.reshape(-1, *v.shape[batch_dims:]) for k, v in _tensors(data).items()}
    non_tensors = {k: v.reshape(-1, *v.shape[batch_dims:]) for k, v in data.non_tensor_batch.items()}
    rows = next(iter(tensors.values())).shape[0] if tensors else next(
        (v.shape[0] for v in non_tensors.values()), 0)
    return _rebuild(data, tensors, non_tensors, rows)


def _columns(key: str, value: np.ndarray) -> np.ndarray:
    """A non-tensor entry as an array with the columns as its second dim (rows of lists become a 2-D array)."""
    if value.ndim >= 2:
        return value
    table = np.empty((len(value), len(value[0]) if len(value) else 0), dtype=object)
    for i, row in enumerate(value):
        if len(row) != table.shape[1]:
            raise ProtocolAssertionError(f"unfold_column_chunks: rows of non_tensor_batch[{key!r}] differ in length")
        table[i, :] = list(row)
    return table


def _split_columns(key: str, value: Any, n_split: int, rows: int) -> Any:
    if value.shape[1] % n_split != 0:
        raise ProtocolAssertionError(
            f"unfold_column_chunks: {key!r} has {value.shape[1]} columns, not divisible by n_split={n_split}")
    return value.reshape(rows * n_split, value.shape[1] // n_split, *value.shape[2:])


def unfold_column_chunks(data: Any, n_split: int, split_keys: list[str] | None = None) -> Any:
    """Cut the second dim of each ``split_keys`` entry into ``n_split`` chunks that become rows of their own;
    every other entry is repeated ``n_split`` times (interleaved) to match. Row i, chunk j lands at row
    i * n_split + j."""
    split_keys = set(split_keys or [])
    rows = len(data)
    tensors = {
        k: _split_columns(k, v, n_split, rows) if k in split_keys else v.repeat_interleave(n_split, dim=0)
        for k, v in _tensors(data).items()
    }
    non_tensors = {
        k: _split_columns(k, _columns(k, v), n_split, rows) if k in split_keys else np.repeat(v, n_split, axis=0)
        for k, v in data.non_tensor_batch.items()
    }
    return _rebuild(data, tensors, non_tensors, rows * n_split)
