"""Tensors and TensorDicts as plain bytes and tuples (upstream verl's ``serialize_*`` / ``deserialize_*``).

A tensor becomes ``(dtype name, shape, raw bytes)``: no pickle, so a receiver can rebuild it without trusting the
sender, and dtypes numpy lacks (bfloat16) travel too. A TensorDict becomes ``(batch_size, device, items)`` with one
``(key, kind, payload)`` per entry: kind "tensor", "nested" (the components of a nested tensor and its layout),
"data" (a NonTensorData value) or "stack" (a NonTensorStack's list).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

__all__ = [
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "serialize_single_tensor",
    "serialize_tensordict",
]

_LAYOUTS = {"torch.strided": torch.strided, "torch.jagged": torch.jagged}


def _dtype_from_name(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown tensor dtype {name!r} in serialized data")
    return dtype


def serialize_single_tensor(obj: torch.Tensor) -> tuple[str, tuple[int, ...], bytes]:
    """``(dtype name, shape, bytes)`` of a dense tensor (copied to CPU, made contiguous)."""
    if not isinstance(obj, torch.Tensor) or obj.is_nested:
        raise TypeError(f"serialize_single_tensor takes a dense torch.Tensor, got {type(obj).__name__}")
    flat = obj.detach().to("cpu").contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return str(obj.dtype).removeprefix("torch."), tuple(obj.shape), raw


def deserialize_single_tensor(data: tuple[str, tuple[int, ...], Any]) -> torch.Tensor:
    """The tensor ``serialize_single_tensor`` described (a fresh CPU tensor that owns its memory)."""
    dtype_name, shape, raw = data
    dtype = _dtype_from_name(dtype_name)
    if len(raw) == 0:
        return torch.empty(tuple(shape), dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(tuple(shape))


def _serialize_entry(key: str, value: Any) -> tuple[str, str, Any]:
    if isinstance(value, NonTensorStack):
        return key, "stack", value.tolist()
    if isinstance(value, NonTensorData):
        return key, "data", value.data
    if isinstance(value, torch.Tensor) and value.is_nested:
        return key, "nested", (str(value.layout), [serialize_single_tensor(t) for t in value.unbind()])
    if isinstance(value, torch.Tensor):
        return key, "tensor", serialize_single_tensor(value)
    raise TypeError(f"serialize_tensordict: entry {key!r} is a {type(value).__name__}, not a tensor or non-tensor data")


def serialize_tensordict(batch: TensorDict) -> tuple[tuple[int, ...], str | None, list[tuple[str, str, Any]]]:
    """``(batch_size, device, items)``; undo with ``deserialize_tensordict``."""
    items = [_serialize_entry(key, batch.get(key)) for key in batch.keys()]
    device = str(batch.device) if batch.device is not None else None
    return tuple(batch.batch_size), device, items


def _deserialize_entry(kind: str, payload: Any) -> Any:
    if kind == "tensor":
        return deserialize_single_tensor(payload)
    if kind == "nested":
        layout_name, parts = payload
        if layout_name not in _LAYOUTS:
            raise ValueError(f"unknown nested-tensor layout {layout_name!r} in serialized data")
        return torch.nested.as_nested_tensor([deserialize_single_tensor(p) for p in parts], layout=_LAYOUTS[layout_name])
    if kind == "data":
        return NonTensorData(payload)
    if kind == "stack":
        return NonTensorStack.from_list([NonTensorData(v) for v in payload])
    raise ValueError(f"unknown entry kind {kind!r} in serialized data")


def deserialize_tensordict(data: tuple[tuple[int, ...], str | None, list[tuple[str, str, Any]]]) -> TensorDict:
    """The TensorDict ``serialize_tensordict`` described, on the device it named."""
    batch_size, device, items = data
    source = {key: _deserialize_entry(kind, payload) for key, kind, payload in items}
    result = TensorDict(source, batch_size=list(batch_size))
    return result.to(device) if device is not None else result
