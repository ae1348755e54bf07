"""mallopt tuning: applied once on glibc, switched off by VERL_MALLOC_TUNING=0, and allocation still works.

The glibc settings are process-wide and permanent, so they are applied in a child process, not in pytest itself.
"""

from __future__ import annotations

import multiprocessing
import sys

import pytest

from verl.utils import malloc_tuning


def test_switched_off_by_env(monkeypatch):
    monkeypatch.setattr(malloc_tuning, "_applied", False)
    monkeypatch.setenv("VERL_MALLOC_TUNING", "0")
    assert malloc_tuning.tune_malloc_for_training() is False


def _child(queue) -> None:
    from verl.utils.memory_stats import peak_rss_gb, reset_peak_rss

    first = malloc_tuning.tune_malloc_for_training()
    second = malloc_tuning.tune_malloc_for_training()
    big = bytearray(64 << 20)  # 64 MiB, above glibc's largest mmap threshold: now served from the heap
    big[:: 1 << 12] = b"\x01" * len(big[:: 1 << 12])  # touch every page
    total = sum(big[:: 1 << 12])
    del big
    reset_peak_rss()
    kept = peak_rss_gb()  # the freed block stays mapped ...
    malloc_tuning.release_free_memory()
    reset_peak_rss()
    queue.put((first, second, total, kept - peak_rss_gb()))  # ... until released


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_applied_on_glibc_and_idempotent(monkeypatch):
    monkeypatch.delenv("VERL_MALLOC_TUNING", raising=False)
    ctx = multiprocessing.get_context("spawn")  # not fork: see tests/helpers/ranks.py
    queue = ctx.Queue()
    child = ctx.Process(target=_child, args=(queue,), daemon=True)
    child.start()
    try:
        result = queue.get(timeout=120)
    finally:
        child.kill()
        child.join(timeout=10)
    assert result[:3] == (True, True, (64 << 20) >> 12)
    assert result[3] > 0.05  # ~64 MiB handed back by release_free_memory
