"""Run a test scenario on N fresh processes (gloo ranks) and collect what each rank reports.

Spawned, not forked: a fork inherits the parent's threads' locks (tqdm's monitor, OpenMP's pool, Ray's and gloo's
threads left by earlier tests), and a child that forks while one of them is held hangs forever — only in the full
suite, never alone. The children are killed when the scenario fails or overruns, so a hung rank cannot keep pytest
(whose exit joins non-daemon children) alive past its own timeout.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Callable

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_then_exit(rank: int, fn: Callable[..., None], *args: Any) -> None:
    """Run the scenario, then leave without interpreter teardown. The scenario has reported through the manager and
    closed its process group; what is left to tear down is C++ static state (gloo's and OpenMP's threads), and that
    teardown aborted a rank about once in four full runs ("terminate called without an active exception") after
    its scenario had passed. A scenario that raises still exits through torch's wrapper, which reports the error."""
    fn(rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(fn: Callable[..., None], *args: Any, nprocs: int, timeout_s: float = 240.0) -> dict:
    """Call ``fn(rank, *args, results)`` on ``nprocs`` spawned processes; return the dict the ranks filled.

    ``fn`` must be a module-level function (spawn pickles it by name).
    """
    # The manager's server process is spawned too: mp.Manager() forks it, with the hazard above (in a loaded full
    # suite the forked server once died before answering: ConnectionResetError in manager.dict()).
    manager = mp.get_context("spawn").Manager()
    try:
        results = manager.dict()
        context = mp.start_processes(_run_then_exit, args=(fn, *args, results), nprocs=nprocs, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        try:
            while not context.join(timeout=5):  # raises ProcessRaisedException/ProcessExitedException on failure
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{fn.__name__} on {nprocs} rank(s) did not finish within {timeout_s:.0f} s")
        finally:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                    process.join(5)
        return dict(results)
    finally:
        manager.shutdown()
