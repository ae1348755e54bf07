"""Small Python helpers upstream keeps in ``verl.utils.py_functional``: a temporary environment variable and a
time limit on a function call."""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from verl.utils.metric.utils import append_to_dict

__all__ = ["append_to_dict", "temp_env_var", "timeout_limit"]


@contextmanager
def temp_env_var(key: str, value: str) -> Iterator[None]:
    """``os.environ[key] = value`` inside the block; the previous value (or its absence) is restored on exit,
    exception or not. Nests."""
    previous = os.environ.get(key)
    os.environ[key] = value
    try:
        yield None
    finally:
        if previous is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = previous


def _child(func: Callable, queue: Any, args: tuple, kwargs: dict) -> None:
    try:
        outcome = (True, func(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - handed to the parent, which re-raises it
        outcome = (False, exc)
    try:
        queue.put(outcome)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        queue.put((False, RuntimeError(f"{func.__name__} finished but its outcome cannot be sent back: {exc}")))


def _call_in_child(func: Callable, seconds: float, args: tuple, kwargs: dict) -> Any:
    """Run in a forked child; the parent waits ``seconds``, then kills it and raises TimeoutError."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue(maxsize=1)
    process = ctx.Process(target=_child, args=(func, queue, args, kwargs), daemon=True)
    process.start()
    try:
        ok, value = queue.get(timeout=seconds)
    except Exception:  # queue.Empty: no answer in time (or the child died without one)
        alive = process.is_alive()
        process.kill()
        process.join()
        if alive:
            raise TimeoutError(f"{func.__name__} did not finish within {seconds} s") from None
        raise RuntimeError(f"{func.__name__} exited with code {process.exitcode} without a result") from None
    process.join()
    if not ok:
        raise value
    return value


def _call_with_alarm(func: Callable, seconds: float, args: tuple, kwargs: dict) -> Any:
    """SIGALRM after ``seconds`` (main thread of a POSIX process only)."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"{func.__name__} did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return func(*args, **kwargs)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def timeout_limit(seconds: float, use_signals: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: the call raises TimeoutError when it runs longer than ``seconds``.

    By default the function runs in a forked child process that is killed at the deadline (so runaway native code
    stops too); its return value and exceptions come back pickled. ``use_signals=True`` uses SIGALRM in this
    process instead: only from the main thread, but without pickling.
    """
    if use_signals and os.name != "posix":
        raise OSError(f"timeout_limit(use_signals=True) needs a POSIX system, this is {os.name!r}")

    def decorator(func: Callable) -> Callable:
        call = _call_with_alarm if use_signals else _call_in_child

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return call(func, seconds, args, kwargs)

        return wrapper

    return decorator
