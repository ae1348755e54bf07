"""``global_profiler.tool=torch_memory`` (CUDA only): the CUDA caching allocator's history, dumped as a memory
snapshot at the end of each profiled step (open it at https://pytorch.org/memory_viz).

The history is recorded from the profiler's start with ``torch.cuda.memory._record_memory_history``
(the role's ``trace_alloc_max_entries``, and global_tool_config.torch_memory's ``context``, ``stacks`` and
``kw_args``; torch has no stack-depth setting, so ``stack_depth`` keeps its default) and dumped to ``<save_path>/<step>/<role>/memory_snapshot_rank-<rank>.pickle``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

from verl.utils.profiler.config import GlobalTorchMemoryConfig, ProfilerConfig, TorchMemoryToolConfig

logger = logging.getLogger(__name__)

__all__ = ["TorchMemoryProfiler", "snapshot_path"]


def snapshot_path(save_path: str, step: int, role: str, rank: int) -> str:
    return os.path.join(save_path, str(step), role, f"memory_snapshot_rank-{rank}.pickle")


class TorchMemoryProfiler:
    """One role's CUDA memory snapshots on one rank."""

    def __init__(self, rank: int, config: ProfilerConfig, tool_config: TorchMemoryToolConfig | None, role: str,
                 global_config: GlobalTorchMemoryConfig | None = None) -> None:
        self.rank = rank
        self.role = role
        self.save_path = config.save_path or "outputs/profile"
        self.this_rank = config.enable and config.profiles_rank(rank)
        self.tool_config = tool_config or TorchMemoryToolConfig()
        self.global_config = global_config or GlobalTorchMemoryConfig()
        self.step: int | None = None

    def start(self, profile_step: int = 0, **_: Any) -> None:
        if not self.this_rank or self.step is not None:
            return
        if not torch.cuda.is_available():
            raise RuntimeError("global_profiler.tool=torch_memory records the CUDA allocator: this worker sees no GPU")
        g = self.global_config
        torch.cuda.memory._record_memory_history(
            enabled="all", context=g.context, stacks=g.stacks,
            max_entries=self.tool_config.trace_alloc_max_entries, **g.kw_args)
        self.step = int(profile_step)

    def stop(self) -> None:
        if self.step is None:
            return
        path = snapshot_path(self.save_path, self.step, self.role, self.rank)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        torch.cuda.memory._dump_snapshot(path)
        torch.cuda.memory._record_memory_history(enabled=None)
        logger.info("[Profiler] rank %d: %s memory snapshot of step %d written to %s", self.rank, self.role,
                    self.step, path)
        self.step = None
