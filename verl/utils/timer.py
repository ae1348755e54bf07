"""Wall-clock timers that add a stage's duration to a shared ``timing_raw`` dict.

The trainer wraps each stage of a step (``gen``, ``reward``, ``old_log_prob``, ``adv``, ``update_actor``, ...) in
one of these; ``compute_timing_metrics`` turns the dict into ``timing_s/*`` metrics. Durations *add up* when a
name is timed twice in one step (e.g. several generation rounds), so a stage is never under-reported.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["simple_timer", "marked_timer"]


@contextmanager
def simple_timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    """Add the seconds spent inside the block to ``timing_raw[name]``, also when the block raises."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timing_raw[name] = timing_raw.get(name, 0.0) + (time.perf_counter() - start)


@contextmanager
def marked_timer(name: str, timing_raw: dict[str, float], color: str | None = None, **kwargs: Any) -> Iterator[None]:
    """Upstream's stage timer. ``color`` and extra keyword arguments are accepted for signature compatibility
    (upstream uses them for NVTX ranges in GPU profiles); here it times exactly like :func:`simple_timer`."""
    del color, kwargs
    with simple_timer(name, timing_raw):
        yield
