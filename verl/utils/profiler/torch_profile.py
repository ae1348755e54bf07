"""``global_profiler.tool=torch``: a torch.profiler trace of a role's work in the profiled training steps.

A worker process runs one torch.profiler session at a time (the profiler is per process). Roles that share a
process (the actor, the critic, the reference and the reward model are colocated by default) therefore share it:
the first enabled role to start opens it, the others join, and it ends when the last one stops. Its chrome trace is
written once for each role that took part, to ``<save_path>/<step>/<role>/prof_rank-<rank>.json.gz`` (``<step>``:
the first training step of the trace). Every annotated worker call made while a session is open is a named range,
``<role>/<method>`` (``actor_rollout/update_actor``, ``critic/compute_values``), so each role's work is findable.

``tool_config.torch.step_start`` / ``step_end`` (upstream: "start step in update_policy") of the role that opened
the trace narrow it to optimizer steps ``step_start .. step_end - 1`` of the updates the process runs (update_actor,
update_critic), counted from 0 since the trace began; with the defaults (0, null) the whole step is recorded.

``tool_config.torch.contents`` (upstream v0.7) chooses what the trace holds: ``cpu`` / ``cuda`` the activities
(neither named: both, cuda where there is a GPU), ``shapes`` the operators' input shapes, ``memory`` the tensor
allocations, ``stack`` the Python call stacks. ``tool_config.torch.discrete=true`` writes one trace per annotated
worker call instead of one per step: ``<save_path>/<step>/<role>/<stage>/prof_rank-<rank>.json.gz`` (``<stage>``:
the method, e.g. ``update_actor``; a second call of it in the same step adds ``_1``, ``_2``... to the file name).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from collections.abc import Callable
from typing import Any

import torch

from verl.utils.profiler.config import ProfilerConfig, TorchProfilerToolConfig

logger = logging.getLogger(__name__)

__all__ = ["TorchProfiler", "trace_path", "stage_trace_path", "profile_options"]

_OPEN_ENDED = 10**9  # schedule steps recorded when step_end is null: to the end of the trace


def trace_path(save_path: str, step: int, role: str, rank: int) -> str:
    """Where a role's trace of the profile starting at training step ``step`` goes."""
    return os.path.join(save_path, str(step), role, f"prof_rank-{rank}.json.gz")


def stage_trace_path(save_path: str, step: int, role: str, rank: int, stage: str, index: int = 0) -> str:
    """With ``discrete``: where the ``index``-th call (from 0) of ``stage`` in the profiled step ``step`` goes."""
    name = f"prof_rank-{rank}.json.gz" if index == 0 else f"prof_rank-{rank}_{index}.json.gz"
    return os.path.join(save_path, str(step), role, stage, name)


def profile_options(tool_config: TorchProfilerToolConfig) -> dict[str, Any]:
    """torch.profiler.profile's arguments for ``tool_config.torch.contents`` (upstream's mapping)."""
    contents = set(tool_config.contents)
    named = contents & {"cpu", "cuda"}
    activities = []
    if not named or "cpu" in contents:
        activities.append(torch.profiler.ProfilerActivity.CPU)
    if (not named and torch.cuda.is_available()) or "cuda" in contents:
        if not torch.cuda.is_available():
            raise ValueError("tool_config.torch.contents names 'cuda', but this machine has no CUDA GPU; remove it")
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return {"activities": activities, "record_shapes": "shapes" in contents,
            "profile_memory": "memory" in contents, "with_stack": "stack" in contents}


class _Session:
    """The process's one torch.profiler session and the roles in it."""

    current: _Session | None = None

    def __init__(self, owner: TorchProfiler, step: int, members: list[TorchProfiler] | None = None,
                 stage: str | None = None) -> None:
        self.owner = owner
        self.step = step
        self.stage = stage  # discrete: the annotated call this trace holds; None: the whole step
        self.members: list[TorchProfiler] = members or [owner]
        self.exported: list[str] = []
        self.updating = False  # an update has begun: from here on each optimizer step ends a schedule step
        window = owner.tool_config
        schedule = None
        if not window.whole_step:
            active = (window.step_end - window.step_start) if window.step_end is not None else _OPEN_ENDED
            # schedule step 0: the work before the first update; step i + 1: from the end of optimizer step i - 1 to
            # the end of optimizer step i, across the update calls of the process
            schedule = torch.profiler.schedule(wait=window.step_start, warmup=1, active=active, repeat=1)
        self.prof = torch.profiler.profile(schedule=schedule, on_trace_ready=self._export,
                                           **profile_options(window))
        self.prof.start()

    def _export(self, prof: Any) -> None:
        first = None
        for member in self.members:
            path = self._path(member)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if first is None:
                prof.export_chrome_trace(path)
                first = path
            elif path != first:
                shutil.copyfile(first, path)
            self.exported.append(path)
            logger.info("[Profiler] rank %d: %s trace of step %d written to %s", member.rank, member.role,
                        self.step, path)

    def _path(self, member: TorchProfiler) -> str:
        if self.stage is None:
            return trace_path(member.save_path, self.step, member.role, member.rank)
        index = member.stage_calls.get(self.stage, 0)
        member.stage_calls[self.stage] = index + 1
        return stage_trace_path(member.save_path, self.step, member.role, member.rank, self.stage, index)

    def tick(self) -> None:
        """One schedule step (the update began, or an optimizer step ended)."""
        self.prof.step()

    def close(self) -> None:
        self.prof.stop()
        if not self.exported:
            logger.warning("[Profiler] rank %d: the torch trace of step %d recorded nothing: the update had no "
                           "optimizer step in tool_config.torch's window [%d, %s)", self.owner.rank, self.step,
                           self.owner.tool_config.step_start, self.owner.tool_config.step_end)


class TorchProfiler:
    """One role's torch profiler on one rank; started and stopped by the driver around the profiled steps."""

    def __init__(self, rank: int, config: ProfilerConfig, tool_config: TorchProfilerToolConfig | None,
                 role: str) -> None:
        self.rank = rank
        self.role = role
        self.tool_config = tool_config or TorchProfilerToolConfig()
        self.save_path = config.save_path or "outputs/profile"
        self.this_rank = config.enable and config.profiles_rank(rank)
        self.in_session = False
        self.discrete = self.tool_config.discrete
        if self.discrete and not self.tool_config.whole_step:  # refused before Ray (profiler_checks) as well
            raise ValueError("tool_config.torch.discrete=true records each stage whole; leave step_start=0 and "
                             "step_end=null")
        self.armed_step: int | None = None  # discrete: the profiled step whose annotated calls get a trace each
        self.stage_calls: dict[str, int] = {}
        profile_options(self.tool_config)  # contents it cannot record are refused here, not at the first step

    def start(self, profile_step: int = 0, **_: Any) -> None:
        if not self.this_rank or self.in_session or self.armed_step is not None:
            return
        if self.discrete:
            self.armed_step, self.stage_calls = int(profile_step), {}
            return
        session = _Session.current
        if session is None:
            _Session.current = _Session(self, int(profile_step))
        else:
            session.members.append(self)
        self.in_session = True

    def stop(self) -> None:
        self.armed_step = None
        if not self.in_session:
            return
        self.in_session = False
        session = _Session.current
        if session is not None and not any(m.in_session for m in session.members):
            # the last role of the process to stop ends the trace; each role that took part gets its copy
            _Session.current = None
            session.close()


def _in_session(session: _Session, label: str, func: Callable, instance: Any, optimizer_attr: str | None,
                args: tuple, kwargs: dict) -> Any:
    """Run a worker method while a trace records: a named range; around an update, the window's ticks (the update
    began, each optimizer step ended) when the trace's opener narrowed it to some optimizer steps."""
    handle = None
    if optimizer_attr is not None and not session.owner.tool_config.whole_step:
        if not session.updating:
            session.updating = True
            session.tick()
        optimizer = getattr(instance, optimizer_attr, None)
        if optimizer is not None:
            handle = optimizer.register_step_post_hook(lambda *_: session.tick())
    try:
        with torch.profiler.record_function(label):
            return func(instance, *args, **kwargs)
    finally:
        if handle is not None:
            handle.remove()


def annotate_call(message: str | None, optimizer_attr: str | None) -> Callable[[Callable], Callable]:
    """The decorator behind DistProfiler.annotate: looks up the instance's ``profiler`` at call time."""

    def decorator(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(instance: Any, *args: Any, **kwargs: Any) -> Any:
            session = _Session.current
            # named after the instance's role, whether or not that role records (another role's trace holds it)
            role = getattr(getattr(instance, "profiler", None), "role", type(instance).__name__)
            label = f"{role}/{message or func.__name__}"
            if session is not None:
                return _in_session(session, label, func, instance, optimizer_attr, args, kwargs)
            armed = _armed(instance)
            if not armed:
                return func(instance, *args, **kwargs)
            # discrete: this call is a trace of its own, for each armed role of the worker
            session = _Session(armed[0], armed[0].armed_step, members=armed, stage=message or func.__name__)
            _Session.current = session
            try:
                return _in_session(session, label, func, instance, optimizer_attr, args, kwargs)
            finally:
                _Session.current = None
                session.close()

        return wrapper

    return decorator


def _armed(instance: Any) -> list[TorchProfiler]:
    """The worker's torch profilers armed for a discrete trace (its role's, then the extra roles' it serves)."""
    out = []
    for dist_profiler in (getattr(instance, "profiler", None), *getattr(instance, "extra_profilers", ())):
        impl = getattr(dist_profiler, "impl", None)
        if isinstance(impl, TorchProfiler) and impl.armed_step is not None:
            out.append(impl)
    return out
