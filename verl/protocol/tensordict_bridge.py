"""DataProto <-> plain TensorDict, as upstream verl's ``DataProto.to_tensordict`` / ``from_tensordict``.

In the TensorDict, tensors stay tensors, each non_tensor_batch key becomes a per-row NonTensorStack and each
meta_info key a batch-wide NonTensorData (the ``verl.utils.tensordict_utils`` conventions); the way back sorts them
into the three parts again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from verl.protocol.helpers import ProtocolAssertionError, to_object_array
from verl.utils import tensordict_utils as tu

__all__ = ["dataproto_parts_from_tensordict", "dataproto_to_tensordict"]


def dataproto_to_tensordict(data: Any) -> TensorDict:
    """One TensorDict holding a DataProto's tensors, non-tensors (as lists) and meta_info."""
    per_row: dict[str, Any] = dict(data.batch.items()) if data.batch is not None else {}
    for key, value in data.non_tensor_batch.items():
        if key in per_row:
            raise ProtocolAssertionError(f"to_tensordict: {key!r} is both a batch and a non_tensor_batch key")
        per_row[key] = value.tolist()
    clash = sorted(set(per_row) & set(data.meta_info))
    if clash:
        raise ProtocolAssertionError(f"to_tensordict: meta_info keys {clash} are also per-row keys")
    return tu.get_tensordict(per_row, non_tensor_dict=dict(data.meta_info))


def dataproto_parts_from_tensordict(
    tensor_dict: TensorDict, meta_info: dict | None = None, num_batch_dims: int = 1
) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray], dict]:
    """(tensors, non_tensors, meta_info) for ``DataProto.from_dict``, from a TensorDict built as above."""
    if num_batch_dims != 1:
        raise ProtocolAssertionError(f"from_tensordict: a DataProto has one batch dim, got num_batch_dims={num_batch_dims}")
    tensors: dict[str, torch.Tensor] = {}
    non_tensors: dict[str, np.ndarray] = {}
    meta = dict(meta_info or {})
    for key in tensor_dict.keys():
        value = tensor_dict.get(key)
        if isinstance(value, NonTensorStack):
            non_tensors[key] = to_object_array(key, value.tolist())
        elif isinstance(value, NonTensorData):
            meta[key] = value.data
        elif isinstance(value, torch.Tensor):
            tensors[key] = value
        else:
            raise TypeError(f"from_tensordict: {key!r} is a {type(value).__name__}; expected a tensor or non-tensor data")
    return tensors, non_tensors, meta
