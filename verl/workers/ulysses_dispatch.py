"""Ulysses in a worker: the ranks of one sequence-parallel group must work on the same rows.

The driver splits a batch into one chunk per rank (Dispatch.DP_COMPUTE_PROTO) as for plain data parallelism. A
worker with sp > 1 all-gathers its group's chunks, so every rank of the group holds the group's rows (the data-
parallel shard of dp = world / sp), computes on them together (each rank on 1/sp of every packed row), and returns
only the rows of its own chunk: the driver's concatenation then has every row once, in order. This is the same
data flow as upstream's dispatch by registered dp rank (the group's ranks get one shard, one of them answers),
kept inside the worker so the dispatcher stays rank-agnostic; the cost is one all-gather of the input chunk.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch.distributed as dist

from verl.protocol import DataProto
from verl.utils.ulysses import create_ulysses_group, set_ulysses_sequence_parallel_group

__all__ = ["SequenceParallelRole"]


class SequenceParallelRole:
    """One role's SP group in a worker (``group`` None when sp is 1: every method is then a pass-through)."""

    def __init__(self, sp_size: int, key: str) -> None:
        self.sp_size = int(sp_size)
        self.key = key
        world = dist.get_world_size() if dist.is_initialized() else 1
        if world % self.sp_size:
            raise ValueError(f"{key}={self.sp_size} must divide the role's {world} ranks "
                             "(trainer.nnodes * trainer.n_gpus_per_node)")
        self.dp_size = world // self.sp_size
        self.group = create_ulysses_group(self.sp_size, key)
        if self.group is not None:
            set_ulysses_sequence_parallel_group(self.group)

    def gather(self, data: DataProto) -> tuple[DataProto, slice]:
        """The group's rows (every chunk of the group, in rank order) and where this rank's own chunk lies."""
        if self.group is None:
            return data, slice(0, len(data))
        parts: list[Any] = [None] * self.sp_size
        dist.all_gather_object(parts, data, group=self.group)
        rank = dist.get_rank(self.group)
        start = sum(len(p) for p in parts[:rank])
        return DataProto.concat(parts), slice(start, start + len(parts[rank]))

    def scale_token_budgets(self, cfg: Any, *fields: str) -> Any:
        """Per-GPU token budgets count the tokens a rank holds: a micro-batch of sp ranks may hold sp times as
        many (upstream multiplies them by sp the same way)."""
        if self.sp_size == 1:
            return cfg
        return dataclasses.replace(cfg, **{f: getattr(cfg, f) * self.sp_size for f in fields})
