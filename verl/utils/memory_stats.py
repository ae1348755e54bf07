"""Peak memory of this process, as per-step metrics (upstream names where upstream has one)."""

from __future__ import annotations

import resource
import sys

import torch

__all__ = ["peak_rss_gb", "reset_peak_rss", "peak_memory_metrics"]

_GIB = 1024**3


def _vm_hwm_bytes() -> int | None:
    """Linux's resettable peak RSS (VmHWM in /proc/self/status), None where there is no such file."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def peak_rss_gb() -> float:
    """Peak resident set size in GiB: since the last ``reset_peak_rss()`` on Linux, since start elsewhere."""
    hwm = _vm_hwm_bytes()
    if hwm is not None:
        return hwm / _GIB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / _GIB if sys.platform == "darwin" else peak * 1024 / _GIB


def reset_peak_rss() -> bool:
    """Restart the peak-RSS count from the current RSS (Linux ``/proc/self/clear_refs``); False where unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


def peak_memory_metrics() -> dict[str, float]:
    """``perf/cpu_rss_peak_gb`` always; ``perf/max_memory_allocated_gb`` / ``_reserved_gb`` on a CUDA device."""
    metrics = {"perf/cpu_rss_peak_gb": peak_rss_gb()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        metrics["perf/max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / _GIB
        metrics["perf/max_memory_reserved_gb"] = torch.cuda.max_memory_reserved() / _GIB
    return metrics
