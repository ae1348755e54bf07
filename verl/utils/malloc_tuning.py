"""Keep freed host memory inside the process on glibc, so a training step does not page-fault its way through
gigabytes of fresh memory every time.

glibc hands large blocks (>= a dynamic threshold of at most 32 MiB) straight from mmap and returns them on free;
the heap top is trimmed back to the OS above M_TRIM_THRESHOLD. A CPU forward/backward allocates and frees the same
activation sizes every micro-batch, so each step re-faults them page by page (the kernel zeroes every 4 KiB page):
measured on SmolLM2-135M, one actor update spent ~4-5 s of system time in ~1 M minor page faults, next to ~10 s of
compute. Serving every allocation from the heap and never trimming it keeps the pages mapped after the first step;
the cost is that the process's RSS stays at its peak (which the next step needs again anyway).

``tune_malloc_for_training()`` applies that with mallopt at run time (no restart, no LD_PRELOAD); it is a no-op off
glibc. ``VERL_MALLOC_TUNING=0`` turns it off. ``release_free_memory()`` hands the free blocks back on demand (e.g.
between two phases whose peaks should be measured separately).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys

__all__ = ["tune_malloc_for_training", "release_free_memory"]

logger = logging.getLogger(__name__)

# mallopt parameter numbers from glibc's <malloc.h>
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4
_TOP_PAD_BYTES = 64 << 20  # grow the heap in 64 MiB steps: fewer brk calls for activation-sized blocks
_applied = False


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def tune_malloc_for_training() -> bool:
    """Serve large blocks from the heap and never trim it (glibc only). Returns whether the settings were applied."""
    global _applied
    if _applied:
        return True
    if not sys.platform.startswith("linux") or os.environ.get("VERL_MALLOC_TUNING", "1") == "0":
        return False
    mallopt = getattr(_libc(), "mallopt", None)
    if mallopt is None:  # no libc found, or one without mallopt (musl): nothing to tune
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    ok = all(mallopt(param, value) == 1 for param, value in (
        (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_TOP_PAD, _TOP_PAD_BYTES)))
    if not ok:
        logger.warning("mallopt refused a setting; host allocations keep glibc's defaults")
    _applied = ok
    return ok


def release_free_memory() -> bool:
    """Return the heap's free blocks to the OS now (glibc malloc_trim); False where unavailable."""
    trim = getattr(_libc(), "malloc_trim", None) if sys.platform.startswith("linux") else None
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True
