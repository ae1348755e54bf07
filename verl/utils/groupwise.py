"""Group-wise statistics: arbitrary group labels to contiguous ids, and per-group mean / std / count.

Upstream's ``verl.utils.as_torch_index`` and ``verl.utils.group_mean_std`` (GRPO-style normalisation without a
Python loop over groups).

Device: ``device`` when given, else ``VERL_FORCE_DEVICE`` when set, else the input tensor's device (CPU for lists
and arrays). Upstream moves to CUDA whenever one is visible; here data stays where it is unless asked.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

__all__ = ["as_torch_index", "group_mean_std"]

_INTEGER_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool)


def _target_device(explicit: torch.device | str | None, data: Any = None) -> torch.device:
    if explicit is not None:
        return torch.device(explicit)
    forced = os.environ.get("VERL_FORCE_DEVICE")
    if forced:
        return torch.device(forced)
    return data.device if isinstance(data, torch.Tensor) else torch.device("cpu")


def _near_integers(values: np.ndarray) -> np.ndarray | None:
    """The values as int64 when every one is within 1e-6 of an integer, else None."""
    rounded = np.rint(values)
    return rounded.astype(np.int64) if np.allclose(values, rounded, rtol=0.0, atol=1e-6) else None


def _as_label_array(index: Any) -> np.ndarray:
    if isinstance(index, torch.Tensor):
        return index.detach().reshape(-1).cpu().numpy()
    try:
        arr = np.asarray(index)
    except (ValueError, TypeError):  # ragged or odd sequences: one object per label
        arr = np.array(list(index), dtype=object)
    return arr.reshape(-1)


def as_torch_index(index: Any, device: torch.device | str | None = None) -> torch.Tensor:
    """Group labels (tensor, array, list of ints / floats / strings / UUIDs / mixed) as a 1-D int64 tensor.

    Integer labels (and floats within 1e-6 of integers, and numeric strings) keep their integer values; other
    labels are factorised to 0..G-1 in sorted order of their string forms. Equal labels always get equal ids,
    and ``"0042"`` (a string) is not the integer 42 when the two are mixed.
    """
    target = _target_device(device, index)
    if isinstance(index, torch.Tensor) and index.dtype in _INTEGER_DTYPES:
        return index.reshape(-1).to(device=target, dtype=torch.long)
    arr = _as_label_array(index)
    ids: np.ndarray | None = None
    if arr.dtype.kind in "iub":
        ids = arr.astype(np.int64)
    elif arr.dtype.kind == "f":
        ids = _near_integers(arr.astype(np.float64))
    elif arr.dtype.kind in "US":
        try:
            ids = arr.astype(np.int64)
        except ValueError:
            ids = None
    if ids is None:
        _, inverse = np.unique(np.array([str(x) for x in arr], dtype=object), return_inverse=True)
        ids = inverse.astype(np.int64).reshape(-1)
    return torch.from_numpy(ids).to(target)


@torch.no_grad()
def group_mean_std(scores: torch.Tensor, gidx: torch.Tensor, eps: float = 1e-6,
                   device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-group (mean, std, count), each a float32 tensor of G = max(gidx) + 1 entries.

    std uses Bessel's correction, sqrt(max(var, eps)). A group of one (or none) gets mean 0 and std 1, so
    (score - mean) / std leaves a lone sample's score unchanged.
    """
    target = _target_device(device, scores)
    values = scores.reshape(-1).to(device=target, dtype=torch.float32)
    groups = gidx.reshape(-1).to(device=target, dtype=torch.long)
    if values.numel() != groups.numel():
        raise ValueError(f"group_mean_std: {values.numel()} scores but {groups.numel()} group ids; give one id per score")
    if groups.numel() == 0:
        empty = torch.empty(0, device=target, dtype=torch.float32)
        return empty, empty.clone(), empty.clone()
    num_groups = int(groups.max().item()) + 1
    sums = torch.zeros(3, num_groups, device=target, dtype=torch.float32)
    sums[0].index_add_(0, groups, torch.ones_like(values))
    sums[1].index_add_(0, groups, values)
    sums[2].index_add_(0, groups, values * values)
    count, total, total_sq = sums
    mean = total / count.clamp_min(1.0)
    var = (total_sq - total * mean) / (count - 1.0).clamp_min(1.0)
    std = var.clamp_min(eps).sqrt()
    lone = count <= 1.0
    mean = torch.where(lone, torch.zeros_like(mean), mean)
    std = torch.where(lone, torch.ones_like(std), std)
    return mean, std, count
