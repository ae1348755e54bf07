"""The DataProto file format: ``torch.load(weights_only=True)`` reads it, so loading never runs pickled code.

``torch.save`` writes one dict of tensors and plain Python values (dict, list, str, int, float, bool, None).
Everything else a DataProto holds is encoded into those first and decoded after loading:

- a numpy array of numbers, bools or strings -> ("__verl__", "ndarray", dtype, shape, raw bytes as a uint8 tensor
  or, for strings, the list of items); an object array -> ("__verl__", "objects", shape, [encoded items]);
- a numpy scalar -> ("__verl__", "npscalar", dtype, raw bytes); a tuple -> ("__verl__", "tuple", [items]);
  bytes -> ("__verl__", "bytes", uint8 tensor).

Tuples in the encoding are always such tags, so user data can never be mistaken for one. A value of any other
type (a custom class) cannot be saved: ``encode`` raises TypeError naming where it sits, instead of writing
something that loading would have to unpickle.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

__all__ = ["FORMAT", "decode", "encode", "from_payload", "load_payload", "to_payload"]

FORMAT = "verl.DataProto/1"
_TAG = "__verl__"


def _raw(buffer: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(buffer), dtype=torch.uint8) if buffer else torch.empty(0, dtype=torch.uint8)


def encode(value: Any, where: str) -> Any:
    """``value`` as tensors and plain Python values; ``where`` names it in the error for an unsupported type."""
    if isinstance(value, np.str_):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)) and not isinstance(value, np.generic):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return (_TAG, "objects", list(value.shape), [encode(v, f"{where}[{i}]") for i, v in enumerate(value.ravel())])
        if value.dtype.kind in "US":
            return (_TAG, "ndarray", value.dtype.str, list(value.shape), value.ravel().tolist())
        if value.dtype.kind in "biufc":
            return (_TAG, "ndarray", value.dtype.str, list(value.shape), _raw(np.ascontiguousarray(value).tobytes()))
    elif isinstance(value, np.generic) and value.dtype.kind in "biufc":
        return (_TAG, "npscalar", value.dtype.str, _raw(value.tobytes()))
    elif isinstance(value, bytes):
        return (_TAG, "bytes", _raw(value))
    elif isinstance(value, tuple):
        return (_TAG, "tuple", [encode(v, f"{where}[{i}]") for i, v in enumerate(value)])
    elif isinstance(value, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    elif isinstance(value, dict):
        for key in value:
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise TypeError(f"{where} has a dict key of type {type(key).__name__}; DataProto files keep str/int keys")
        return {k: encode(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise TypeError(
        f"{where} holds a {type(value).__module__}.{type(value).__qualname__}, which a DataProto file cannot keep "
        f"without pickling it; store plain values (str, numbers, lists, dicts, numpy arrays, tensors) instead"
    )


def decode(value: Any) -> Any:
    """The inverse of ``encode``."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        return {k: decode(v) for k, v in value.items()}
    if not isinstance(value, tuple):
        return value
    if len(value) < 2 or value[0] != _TAG:
        raise ValueError(f"not a DataProto file: unexpected tuple {value[:2]!r} in its contents")
    kind, rest = value[1], value[2:]
    if kind == "tuple":
        return tuple(decode(v) for v in rest[0])
    if kind == "bytes":
        return rest[0].numpy().tobytes()
    if kind == "npscalar":
        dtype, raw = rest
        return np.frombuffer(raw.numpy().tobytes(), dtype=np.dtype(dtype))[0]
    if kind == "objects":
        shape, items = rest
        out = np.empty(len(items), dtype=object)
        for i, item in enumerate(items):
            out[i] = decode(item)
        return out.reshape(shape)
    if kind == "ndarray":
        dtype, shape, payload = rest
        if isinstance(payload, list):
            return np.array(payload, dtype=np.dtype(dtype)).reshape(shape)
        return np.frombuffer(payload.numpy().tobytes(), dtype=np.dtype(dtype)).reshape(shape).copy()
    raise ValueError(f"not a DataProto file: unknown tag {kind!r}")


def load_payload(filepath: str | os.PathLike) -> dict:
    """The saved dict, read with ``weights_only=True`` (a file that needs arbitrary unpickling is refused)."""
    path = os.fspath(filepath)
    try:
        payload = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:
        if type(err).__name__ != "UnpicklingError":
            raise
        raise type(err)(
            f"{path} is not a DataProto file this version can load safely (it needs arbitrary unpickling, which "
            f"DataProto.load_from_disk refuses). If it was written by an older verl from a source you trust, load "
            f"it with torch.load(path, weights_only=False) and save it again. Cause: {err}"
        ) from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise TypeError(f"{path} holds a {type(payload).__name__} that is not a DataProto file (format {FORMAT!r})")
    return payload


def to_payload(batch: TensorDict | None, non_tensor_batch: dict, meta_info: dict) -> dict:
    """What ``DataProto.save_to_disk`` writes: the tensors as they are (moved to CPU), the rest encoded."""
    tensors = None
    if batch is not None:
        tensors = {}
        for key in batch.keys():
            value = batch.get(key)
            if not isinstance(value, torch.Tensor) or value.is_nested:
                raise TypeError(f"batch[{key!r}] is a {type(value).__name__}; DataProto files keep dense tensors")
            tensors[key] = value.detach().cpu()
    return {
        "format": FORMAT,
        "batch": tensors,
        "batch_size": list(batch.batch_size) if batch is not None else None,
        "non_tensor_batch": {k: encode(v, f"non_tensor_batch[{k!r}]") for k, v in non_tensor_batch.items()},
        "meta_info": encode(meta_info, "meta_info"),
    }


def from_payload(payload: dict) -> tuple[TensorDict | None, dict, dict]:
    """(batch, non_tensor_batch, meta_info) from what ``load_payload`` read."""
    batch = None
    if payload["batch"] is not None:
        batch = TensorDict(payload["batch"], batch_size=payload["batch_size"])
    non_tensors = {k: decode(v) for k, v in payload["non_tensor_batch"].items()}
    return batch, non_tensors, decode(payload["meta_info"])
