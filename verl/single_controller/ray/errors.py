"""Turning Ray's failure types into errors that say which rank of which worker group failed, and how.

A method that raises comes back as the user's own exception type (so `except ValueError` in the driver works)
with a note naming the rank, group and method plus the remote traceback. A worker process that died comes back
as `WorkerGroupError` naming the worker, its rank and its roles. A call whose deadline passes comes back as
`WorkerDeadlineError` (a WorkerGroupError and a TimeoutError) naming the stage, the method and the ranks still running.
"""

from __future__ import annotations

from dataclasses import dataclass

import ray


class WorkerGroupError(RuntimeError):
    """A worker of a group is gone (killed, out of memory, node lost); the group cannot continue."""


class WorkerDeadlineError(WorkerGroupError, TimeoutError):
    """A call's deadline passed with ranks still running; the group's workers were killed so the run ends."""

    def __init__(self, message: str, *, stage: str, method: str, pending_ranks: list[int], timeout_s: float) -> None:
        super().__init__(message)
        self.stage = stage
        self.method = method
        self.pending_ranks = list(pending_ranks)
        self.timeout_s = timeout_s


@dataclass(frozen=True)
class CallSite:
    """Where a failure happened, for the message."""

    group: str
    roles: tuple[str, ...]
    method: str
    rank: int
    world_size: int
    worker_name: str

    def describe(self) -> str:
        roles = ", ".join(self.roles) or "?"
        return (
            f"rank {self.rank} of {self.world_size} (worker '{self.worker_name}', roles: {roles}) "
            f"of worker group '{self.group}', method {self.method}"
        )


def _add_note(exc: BaseException, note: str) -> None:
    if hasattr(exc, "add_note"):
        exc.add_note(note)
    else:  # Python 3.10: keep the text where 3.11's traceback printer would look
        exc.__notes__ = [*getattr(exc, "__notes__", []), note]


def _root_task_error(err: ray.exceptions.RayTaskError) -> ray.exceptions.RayTaskError:
    """A task that failed on a failed input (e.g. a DataProtoFuture) wraps the first failure; find it."""
    while isinstance(getattr(err, "cause", None), ray.exceptions.RayTaskError):
        err = err.cause
    return err


def translate_error(err: BaseException, site: CallSite) -> BaseException:
    """The exception the driver should raise for `err` from a remote call at `site`."""
    if isinstance(err, ray.exceptions.RayTaskError):
        root = _root_task_error(err)
        cause = getattr(root, "cause", None)
        if isinstance(cause, ray.exceptions.RayActorError):
            # The worker is alive; a worker whose results it was reading (a DataProtoFuture) is not.
            return WorkerGroupError(
                f"{site.describe()} failed: a worker it read inputs from has died. Ray said: "
                f"{type(cause).__name__}: {cause}"
            )
        if isinstance(cause, BaseException):
            _add_note(cause, f"(raised in {site.describe()})")
            # str() of a RayTaskError is the remote process title plus its formatted traceback.
            remote_tb = str(root)
            if remote_tb:
                _add_note(cause, f"remote traceback:\n{remote_tb.rstrip()}")
            return cause
        _add_note(root, f"(raised in {site.describe()})")
        return root
    if isinstance(err, ray.exceptions.RayActorError) and getattr(err, "actor_init_failed", False):
        return WorkerGroupError(
            f"worker failed while being created: {site.describe()}. Fix the error raised in the worker class's "
            f"__init__ (Ray's report, with the remote traceback, follows):\n{err}"
        )
    if isinstance(err, ray.exceptions.RayActorError):
        return WorkerGroupError(
            f"worker process died: {site.describe()}. The worker group cannot continue; look for an out-of-memory "
            f"kill or a crash in the worker's log (Ray temp dir, logs/worker-*.err). Ray said: "
            f"{type(err).__name__}: {err}"
        )
    return err


def deadline_error(site: CallSite, stage: str, pending: list[int], pending_names: list[str], timeout_s: float,
                   explanation: str, key: str) -> WorkerDeadlineError:
    """The error for a call at `site` (rank: the first still running) that outlived its deadline."""
    roles = ", ".join(site.roles) or "?"
    return WorkerDeadlineError(
        f"deadline overrun: stage {stage}, method {site.method} of worker group '{site.group}' (roles: {roles}) "
        f"had no result after {timeout_s:g} s ({explanation}); ranks still running: "
        f"{', '.join(map(str, pending))} of {site.world_size} (workers: {', '.join(pending_names)}). The group's "
        f"workers were killed so the run ends instead of hanging. If this stage legitimately needs longer, raise "
        f"{key}; otherwise look for a hang (a deadlocked collective, a stuck file system) in the workers' logs "
        f"(Ray temp dir, logs/worker-*.err).",
        stage=stage, method=site.method, pending_ranks=pending, timeout_s=timeout_s,
    )
