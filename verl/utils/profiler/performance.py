"""Upstream's ``verl.utils.profiler.performance``: device-memory figures and the step timers, for user code that
imports them from there. The timers are verl.utils.timer's; the memory helpers read the accelerator verl computes
on (verl.utils.device), and report zeros on a CPU, where torch keeps no such counters."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from verl.utils.device import get_torch_device, is_cuda_available
from verl.utils.timer import marked_timer, simple_timer

__all__ = ["_get_current_mem_info", "log_gpu_memory_usage", "GPUMemoryLogger", "simple_timer", "marked_timer",
           "reduce_timing"]

_DIVISORS = {"GB": 1024**3, "MB": 1024**2, "KB": 1024}


def _get_current_mem_info(unit: str = "GB", precision: int = 2) -> tuple[str, str, str, str]:
    """(allocated, reserved, used, total) device memory as strings in ``unit``; all "0.00"-style zeros on a CPU.
    "used" is the device's own count (free vs total), which sees memory outside torch's allocator too."""
    if unit not in _DIVISORS:
        raise ValueError(f"unit must be one of {sorted(_DIVISORS)}, got {unit!r}")
    if not is_cuda_available():
        zero = f"{0:.{precision}f}"
        return zero, zero, zero, zero
    device = get_torch_device()
    free, total = device.mem_get_info()
    values = (device.memory_allocated(), device.memory_reserved(), total - free, total)
    return tuple(f"{v / _DIVISORS[unit]:.{precision}f}" for v in values)  # type: ignore[return-value]


def _message(head: str) -> str:
    allocated, reserved, used, total = _get_current_mem_info()
    return (f"{head}, memory allocated (GB): {allocated}, memory reserved (GB): {reserved}, "
            f"device memory used/total (GB): {used}/{total}")


def log_gpu_memory_usage(head: str, logger: logging.Logger | None = None, level: int = logging.DEBUG,
                         rank: int | None = 0) -> None:
    """Log (or print, without a logger) the device memory figures on ``rank`` (every rank when None)."""
    if dist.is_initialized() and rank is not None and dist.get_rank() != rank:
        return
    if logger is None:
        print(_message(head))
    else:
        logger.log(level, _message(head))


class GPUMemoryLogger:
    """A decorator logging the device memory before and after each call of the decorated function."""

    def __init__(self, role: str, logger: logging.Logger | None = None, level: int = logging.DEBUG,
                 log_only_rank_0: bool = True) -> None:
        self.role = role
        self.logger = logger
        self.level = level
        self.log_only_rank_0 = log_only_rank_0

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def logged(*args: Any, **kwargs: Any) -> Any:
            rank = 0 if self.log_only_rank_0 else None
            log_gpu_memory_usage(f"[{self.role}] Before {fn.__name__}", self.logger, self.level, rank)
            out = fn(*args, **kwargs)
            log_gpu_memory_usage(f"[{self.role}] After {fn.__name__}", self.logger, self.level, rank)
            return out

        logged.__wrapped__ = fn  # type: ignore[attr-defined]
        return logged


def reduce_timing(timing_raw: dict[str, float],
                  reduce_op: Any = torch.distributed.ReduceOp.AVG) -> dict[str, float]:
    """The timings reduced over the ranks (``reduce_op``, average by default); unchanged outside torch.distributed.
    Gloo has no AVG, so the average is a sum divided by the world size there."""
    if not dist.is_initialized():
        return dict(timing_raw)
    keys = sorted(timing_raw)
    values = torch.tensor([float(timing_raw[k]) for k in keys], dtype=torch.float64)
    if is_cuda_available():
        values = values.cuda()
    average = reduce_op == dist.ReduceOp.AVG and dist.get_backend() == "gloo"
    dist.all_reduce(values, op=dist.ReduceOp.SUM if average else reduce_op)
    if average:
        values /= dist.get_world_size()
    return dict(zip(keys, values.cpu().tolist()))
