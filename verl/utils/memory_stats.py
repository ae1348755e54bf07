"""Peak memory of this process, as per-step metrics (upstream names where upstream has one)."""

from __future__ import annotations

import resource
import sys

import torch

__all__ = ["peak_rss_gb", "peak_memory_metrics"]

_GIB = 1024**3


def peak_rss_gb() -> float:
    """The process's peak resident set size since it started (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / _GIB if sys.platform == "darwin" else peak * 1024 / _GIB


def peak_memory_metrics() -> dict[str, float]:
    """``perf/cpu_rss_peak_gb`` always; ``perf/max_memory_allocated_gb`` / ``_reserved_gb`` on a CUDA device."""
    metrics = {"perf/cpu_rss_peak_gb": peak_rss_gb()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        metrics["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / _GIB
        metrics["perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved() / _GIB
    return metrics
