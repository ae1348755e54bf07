"""Scoring samples while the rest of the batch is still being generated.

A ``RewardLoopSession`` owns one event loop on its own thread. ``submit(index, row)`` may be called from any thread
(the agent-loop workers call it the moment a trajectory ends); up to ``num_workers`` samples are scored at once, each
by ``manager.run_single(row)``; synchronous scoring runs on the session's ``num_workers`` threads, so neither the
engine thread nor the agent loops wait for it. ``finish(n)`` waits for every row's score, in row order.

A failure is never dropped: ``finish`` raises ``RewardLoopError`` naming every sample that failed (row and cause),
after all the others have finished, so nothing is left running behind it.

``RewardLoopSpec`` is what the trainer sends the rollout with each batch (``meta_info["reward_loop"]``): the manager,
``num_workers`` and a key; the first spec of a key is kept for the life of the process, with its scoring threads, so
the managers' scoring processes and rate limits survive from step to step. The threads must outlive the sessions:
a scoring process is killed by the kernel when the thread that started it ends (PR_SET_PDEATHSIG, score_pool.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from verl.protocol import DataProto
from verl.workers.reward_loop.base import SampleScore, check_sample_score

__all__ = ["RewardLoopError", "RewardLoopSession", "RewardLoopSpec", "META_KEY"]

META_KEY = "reward_loop"  # meta_info key of the generation batch that carries the spec
_KEPT: dict[str, tuple[Any, ThreadPoolExecutor]] = {}  # spec key -> (manager, its scoring threads) in this process
_KEPT_LOCK = threading.Lock()


class RewardLoopError(RuntimeError):
    """One or more samples could not be scored; the message names each (row, cause)."""


class RewardLoopSpec:
    def __init__(self, manager: Any, num_workers: int, key: str | None = None) -> None:
        self.manager = manager
        self.num_workers = max(1, int(num_workers))
        self.key = key or uuid.uuid4().hex

    def resolve(self) -> tuple[Any, ThreadPoolExecutor]:
        """The manager to score with in this process (the first one received under this key) and its threads."""
        with _KEPT_LOCK:
            if self.key not in _KEPT:
                _KEPT[self.key] = (self.manager, _executor(self.num_workers))
            return _KEPT[self.key]

    def session(self) -> RewardLoopSession:
        manager, executor = self.resolve()
        return RewardLoopSession(manager, self.num_workers, executor)


def _executor(num_workers: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(num_workers, thread_name_prefix="reward-loop-score")


class RewardLoopSession:
    def __init__(self, manager: Any, num_workers: int, executor: ThreadPoolExecutor | None = None) -> None:
        """``executor``: threads for synchronous scoring that outlive this session (None: the session's own)."""
        self.manager = manager
        self.num_workers = max(1, int(num_workers))
        self._own_executor = executor is None
        self._executor = executor or _executor(self.num_workers)
        self._loop = asyncio.new_event_loop()
        self._loop.set_default_executor(self._executor)
        self._semaphore = asyncio.Semaphore(self.num_workers)
        self._futures: dict[int, Future] = {}
        self._lock = threading.Lock()
        self.seconds: dict[int, float] = {}  # per row: from its submission to its score
        self.finished_at: dict[int, float] = {}  # per row: time.perf_counter() when its score was ready
        self.order: list[int] = []  # rows in the order their scores were ready
        self._thread = threading.Thread(target=self._loop.run_forever, name="reward-loop", daemon=True)
        self._thread.start()

    # -- any thread ----------------------------------------------------------------------------------------------

    def submit(self, index: int, row: DataProto) -> None:
        if len(row) != 1:
            raise ValueError(f"the reward loop scores one sample per call; row {index} came with {len(row)} rows")
        with self._lock:
            if index in self._futures:
                raise ValueError(f"row {index} was submitted to the reward loop twice")
            self._futures[index] = asyncio.run_coroutine_threadsafe(self._score(index, row, time.perf_counter()),
                                                                    self._loop)

    def finish(self, num_rows: int) -> list[SampleScore]:
        """Every row's score, in row order, once all are done (rows never submitted are an error)."""
        with self._lock:
            futures = dict(self._futures)
        missing = [i for i in range(num_rows) if i not in futures]
        failures: list[str] = []
        results: list[SampleScore | None] = [None] * num_rows
        for index in range(num_rows):
            if index in missing:
                continue
            try:
                results[index] = futures[index].result()
            except BaseException as err:  # noqa: BLE001 - every failure is reported below, none is dropped
                failures.append(f"row {index}: {type(err).__name__}: {err}")
        if missing:
            failures.append(f"rows {missing} were never submitted for scoring")
        if failures:
            raise RewardLoopError(f"the reward loop could not score {len(failures)} of {num_rows} samples "
                                  f"(reward_model.use_reward_loop=true):\n  " + "\n  ".join(failures))
        return results  # type: ignore[return-value]

    def close(self) -> None:
        """Cancel what is still running and stop the loop's thread (idempotent)."""
        if not self._thread.is_alive():
            return
        with self._lock:
            for future in self._futures.values():
                future.cancel()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        if not self._own_executor:  # closing a loop shuts its default executor down: hand it one never used
            self._loop.set_default_executor(ThreadPoolExecutor(1))
        self._loop.close()
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> RewardLoopSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the loop's thread ---------------------------------------------------------------------------------------

    async def _score(self, index: int, row: DataProto, submitted: float) -> SampleScore:
        async with self._semaphore:
            result = await self.manager.run_single(row)
        checked = check_sample_score(result, f"{type(self.manager).__name__}.run_single (row {index})")
        now = time.perf_counter()
        self.seconds[index] = now - submitted
        self.finished_at[index] = now
        self.order.append(index)
        return checked
