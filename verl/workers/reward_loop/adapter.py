"""A batch reward manager (naive, dapo, prime, batch, a registered one) run one sample at a time in the loop.

Each call scores a one-row batch with ``manager(row, return_dict=True)`` in a thread, so a row's score, its extra info
and its timeout handling are exactly what the batch path gives that row. A manager's scoring processes
(``reward_model.scoring``) are not shared between threads: the adapter keeps one copy of the manager per concurrent
scorer (``reward_model.num_workers`` x ``max_concurrency_per_worker``), each with its own process, handed out from a pool.
"""

from __future__ import annotations

import asyncio
import copy
import threading
from typing import Any

from verl.protocol import DataProto
from verl.workers.reward_loop.base import RewardManagerBase, SampleScore

__all__ = ["BatchManagerAdapter"]


class BatchManagerAdapter(RewardManagerBase):
    """``manager``: an AbstractRewardManager (anything with ``__call__(data, return_dict=True)``)."""

    def __init__(self, manager: Any, num_workers: int = 1) -> None:
        super().__init__(None, getattr(manager, "tokenizer", None))
        self.manager = manager
        self.num_workers = max(1, int(num_workers))
        self._free: list[Any] | None = None
        self._lock = threading.Lock()
        self._available: threading.Semaphore | None = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_free": None, "_lock": None, "_available": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def compute_score(self) -> Any:
        return getattr(self.manager, "compute_score", None)

    def _copies(self) -> list[Any]:
        with self._lock:
            if self._free is None:
                # copies (not the manager itself): each gets its own scoring process; the examples are printed by
                # the batch path's manager only, so the copies print none
                copies = [copy.deepcopy(self.manager) for _ in range(self.num_workers)]
                for c in copies:
                    if hasattr(c, "num_examine"):
                        c.num_examine = 0
                    scorer = getattr(c, "scorer", None)
                    if scorer is not None and hasattr(scorer, "num_processes"):
                        scorer.num_processes = 1  # one call at a time per copy: one process is all it uses
                self._free = copies
                self._available = threading.Semaphore(len(copies))
            return self._free

    def _score_row(self, data: DataProto) -> SampleScore:
        free = self._copies()
        self._available.acquire()
        with self._lock:
            manager = free.pop()
        try:
            result = manager(data, return_dict=True)
        finally:
            with self._lock:
                free.append(manager)
            self._available.release()
        extra = {key: values[0] for key, values in (result.get("reward_extra_info") or {}).items()}
        return {"reward_score": float(result["reward_tensor"].sum()), "reward_extra_info": extra}

    async def run_single(self, data: DataProto) -> SampleScore:
        if len(data) != 1:
            raise ValueError(f"run_single scores one sample; got {len(data)} rows")
        return await asyncio.to_thread(self._score_row, data)

    def close(self) -> None:
        with self._lock:
            copies, self._free = self._free or [], None
        for manager in copies:
            close = getattr(manager, "close", None)
            if close is not None:
                close()
