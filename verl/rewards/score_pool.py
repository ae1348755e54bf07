"""A pool of long-lived scoring processes that gives every call its own deadline.

Why not concurrent.futures / multiprocessing.Pool: neither can kill the one worker whose call hangs (a regex
backtracking forever, a sympy call) and carry on with the rest. Here each worker has its own pipe; a call past its
deadline gets its worker killed and replaced, and the other calls keep going.

- Each worker is a fresh interpreter (spawn semantics: nothing is forked from the driver, which holds Ray, torch
  threads and sockets). It is started with subprocess rather than multiprocessing's "spawn" context because that
  context re-imports the driver's ``__main__`` in every worker: an unguarded training script would start training
  again in each scoring process (and fail with "An attempt has been made to start a new process...").
- The function is shipped with cloudpickle, so lambdas, closures and functions defined in ``__main__`` work.
- Workers live across calls to ``run`` (a spawn start costs ~0.1-3 s on 2 cores, depending on what the function's
  module imports); ``close`` (also run at garbage collection and interpreter exit) ends them all.

This module imports no torch, so a spawned worker starts quickly.
"""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

import cloudpickle

_PR_SET_PDEATHSIG = 1
START_TIMEOUT = 120.0  # seconds for a fresh scoring process to import and load the function (not the call limit)


class ScorePoolError(RuntimeError):
    """The scoring function cannot be shipped to, or run in, a worker process."""


@dataclass
class CallOutcome:
    """What one call came to: exactly one of value / error / timed_out / not_run is meaningful."""

    status: str  # "ok" | "error" | "timeout" | "not_run" (skipped after stop_on_timeout)
    value: Any = None
    error: BaseException | None = None
    seconds: float = 0.0


def _die_with_parent() -> None:
    """Linux: the kernel kills this worker when the driver dies, even mid-call (kill -9 of the driver)."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass


def _portable_error(exc: BaseException) -> BaseException:
    """The exception itself when it survives pickling, else a RuntimeError carrying its traceback text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return RuntimeError(f"{type(exc).__name__}: {exc}\n(unpicklable exception; worker traceback:)\n{text}")


def call_to_completion(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """fn(**kwargs), with an `async def` scorer's coroutine run to its result: a coroutine cannot be pickled back
    to the driver, and upstream's managers await async compute_score functions."""
    result = fn(**kwargs)
    if not inspect.isawaitable(result):
        return result
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_awaited(result))
    # Called from inside a running event loop (this thread cannot block on it): run it on a loop of its own.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, _awaited(result)).result()


async def _awaited(awaitable: Any) -> Any:
    return await awaitable  # asyncio.run takes coroutines only; this also accepts futures and awaitable objects


def _worker_main(fd: int, parent_pid: int) -> None:
    """Entry point of a scoring process: the first message is the cloudpickled function, then kwargs per call."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the driver, which closes the pool
    conn = Connection(fd)
    try:
        fn_bytes = conn.recv_bytes()
    except (EOFError, OSError):
        return
    try:
        fn = cloudpickle.loads(fn_bytes)
    except BaseException as exc:
        conn.send_bytes(cloudpickle.dumps(("ready", _portable_error(exc))))
        return
    conn.send_bytes(cloudpickle.dumps(("ready", None)))
    while True:
        try:
            message = conn.recv_bytes()
        except (EOFError, OSError):
            return  # the driver closed the pipe or died
        kwargs = pickle.loads(message)
        if kwargs is None or os.getppid() != parent_pid:
            return
        try:
            reply: tuple[str, Any] = ("ok", call_to_completion(fn, kwargs))
        except BaseException as exc:
            reply = ("error", _portable_error(exc))
        try:
            payload = cloudpickle.dumps(reply)
        except Exception as exc:
            payload = cloudpickle.dumps(("error", RuntimeError(f"the result {reply[1]!r} cannot be pickled: {exc}")))
        conn.send_bytes(payload)


def _child_env() -> dict[str, str]:
    """The driver's sys.path, so the worker imports the same modules (a user's package next to the script)."""
    paths = [p or os.getcwd() for p in sys.path if isinstance(p, str)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


class _Worker:
    def __init__(self, fn_bytes: bytes) -> None:
        ours, theirs = socket.socketpair()
        command = [sys.executable, "-c", "import sys; from verl.rewards.score_pool import _worker_main; "
                   "_worker_main(int(sys.argv[1]), int(sys.argv[2]))", str(theirs.fileno()), str(os.getpid())]
        self.process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), env=_child_env(), stdin=subprocess.DEVNULL)
        theirs.close()
        self.conn = Connection(ours.detach())
        self.conn.send_bytes(fn_bytes)
        self.started_at = time.monotonic()
        self.ready = False  # until it has loaded the function: deadlines count from then, not from the start

    def wait_ready(self) -> None:
        """Read the worker's start-up message (call when its pipe is readable)."""
        try:
            status, error = cloudpickle.loads(self.conn.recv_bytes())
        except (EOFError, OSError):
            raise ScorePoolError(f"the scoring process (pid {self.pid}) exited with code {self.process.poll()} "
                                 "while starting; its output above says why") from None
        if error is not None:
            raise ScorePoolError(
                f"the scoring process could not load the scoring function ({type(error).__name__}: {error}). "
                "Functions are sent by reference to their module when it is importable: that module must be "
                "importable in a fresh interpreter (PYTHONPATH is the driver's sys.path)") from error
        self.ready = True

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        self.conn.close()

    def stop(self) -> None:
        """Ask an idle worker to exit; kill it if it does not within a second."""
        try:
            self.conn.send_bytes(pickle.dumps(None))
            self.process.wait(timeout=1)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def _shutdown(workers: list[_Worker]) -> None:
    for worker in workers:
        worker.stop()
    workers.clear()


class ScorePool:
    """``run(calls)`` calls ``fn(**kwargs)`` for each kwargs dict on up to ``num_processes`` workers, each call
    limited to ``timeout`` seconds from the moment a worker picks it up."""

    def __init__(self, fn: Callable[..., Any], num_processes: int, timeout: float) -> None:
        if num_processes < 1:
            raise ValueError(f"ScorePool needs num_processes >= 1, got {num_processes}")
        if not timeout > 0:
            raise ValueError(f"ScorePool needs a timeout > 0 seconds, got {timeout}")
        try:
            self._fn_bytes = cloudpickle.dumps(fn)
        except Exception as exc:
            raise ScorePoolError(
                f"the scoring function {fn!r} cannot be sent to a scoring process ({type(exc).__name__}: {exc}). "
                "Make it picklable (no open files, locks or sockets in its closure), or score in the driver "
                "process without a time limit: reward_model.scoring.timeout=null"
            ) from exc
        self.num_processes = num_processes
        self.timeout = float(timeout)
        self._workers: list[_Worker] = []
        self._finalizer = weakref.finalize(self, _shutdown, self._workers)

    def __getstate__(self) -> dict:
        raise TypeError("a ScorePool holds live processes and cannot be pickled; the reward manager makes a new one")

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self._workers]

    def _grow_to(self, count: int) -> None:
        while len(self._workers) < min(count, self.num_processes):
            self._workers.append(_Worker(self._fn_bytes))

    def _replace(self, worker: _Worker) -> _Worker:
        """Kill a worker (hung, or dead already) and start its successor in its slot."""
        worker.kill()
        fresh = _Worker(self._fn_bytes)
        self._workers[self._workers.index(worker)] = fresh
        return fresh

    def run(self, calls: Sequence[dict[str, Any]], stop_on_timeout: bool = False) -> list[CallOutcome]:
        """One outcome per call, in order. With stop_on_timeout, the first timeout ends the run: calls still
        running are killed (their workers replaced) and calls not yet started are reported as not_run."""
        outcomes: list[CallOutcome | None] = [None] * len(calls)
        self._grow_to(len(calls))
        queue = deque(range(len(calls)))
        busy: dict[Connection, tuple[_Worker, int, float]] = {}
        idle = [w for w in self._workers[: len(calls)] if w.ready]
        starting = {w.conn: w for w in self._workers[: len(calls)] if not w.ready}
        stopping = False
        while busy or (queue and not stopping):
            while idle and queue and not stopping:
                worker, index = idle.pop(), queue.popleft()
                worker.conn.send_bytes(pickle.dumps(dict(calls[index])))
                busy[worker.conn] = (worker, index, time.monotonic())
            deadlines = [start + self.timeout for _, _, start in busy.values()]
            deadlines += [w.started_at + START_TIMEOUT for w in starting.values()]
            for conn in wait([*busy, *starting], timeout=max(0.0, min(deadlines) - time.monotonic())):
                if conn in starting:
                    worker = starting.pop(conn)
                    worker.wait_ready()
                    idle.append(worker)
                    continue
                worker, index, start = busy.pop(conn)
                outcomes[index], worker = self._receive(worker, start)
                if worker.ready:
                    idle.append(worker)
                else:  # it died and _receive started its successor
                    starting[worker.conn] = worker
            now = time.monotonic()
            for worker in starting.values():
                if now - worker.started_at >= START_TIMEOUT:
                    raise ScorePoolError(f"a scoring process (pid {worker.pid}) did not start within "
                                         f"{START_TIMEOUT:g} s; the machine may be overloaded")
            for conn, (worker, index, start) in list(busy.items()):
                if now - start >= self.timeout:
                    del busy[conn]
                    outcomes[index] = CallOutcome("timeout", seconds=now - start)
                    fresh = self._replace(worker)
                    starting[fresh.conn] = fresh
                    stopping = stopping or stop_on_timeout
            if stopping:
                for conn, (worker, index, start) in list(busy.items()):
                    del busy[conn]
                    outcomes[index] = CallOutcome("not_run", seconds=time.monotonic() - start)
                    self._replace(worker)
        return [outcome or CallOutcome("not_run") for outcome in outcomes]

    def _receive(self, worker: _Worker, start: float) -> tuple[CallOutcome, _Worker]:
        """The outcome of the worker's call, and the worker to use next (a successor if it died)."""
        seconds = time.monotonic() - start
        try:
            status, payload = cloudpickle.loads(worker.conn.recv_bytes())
        except (EOFError, OSError):
            try:
                code = worker.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            error = ScorePoolError(f"the scoring process (pid {worker.pid}) died with exit code {code} while "
                                   "scoring (killed by a signal when negative: -9 is SIGKILL, often out of memory)")
            return CallOutcome("error", error=error, seconds=seconds), self._replace(worker)
        if status == "ok":
            return CallOutcome("ok", value=payload, seconds=seconds), worker
        return CallOutcome("error", error=payload, seconds=seconds), worker

    def close(self) -> None:
        """End every worker (idempotent); the pool starts new ones if run is called again."""
        _shutdown(self._workers)
