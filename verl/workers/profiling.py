"""The workers' side of the profiler: ``start_profile`` / ``stop_profile`` on every rank of a worker group (the
driver calls them around the profiled steps, verl.trainer.ppo.profiling) and the role's ``DistProfiler``.

Upstream keeps this mixin as ``verl.utils.profiler.profile.DistProfilerExtension``; here it sits with the workers
because it needs the worker-group dispatch (layers import downward only).
"""

from __future__ import annotations

from typing import Any

from verl.single_controller.base import Dispatch, register
from verl.utils.profiler import DistProfiler, ProfilerConfig

__all__ = ["DistProfilerExtension", "role_profiler", "rollout_beside_actor"]


def role_profiler(rank: int, config: ProfilerConfig | None, role: str) -> DistProfiler:
    """The DistProfiler of a worker whose role's ``profiler`` section is ``config`` (None: profiling off)."""
    return DistProfiler(rank=rank, config=config, role=role)


def rollout_beside_actor(rank: int, config: Any, actor: DistProfiler, hybrid: bool) -> tuple[DistProfiler, ...]:
    """The rollout's own profiler in the actor's worker (``config``: the actor_rollout_ref section), where it asks
    for a trace the actor's does not already write: on a rank the actor's skips, or under another save_path
    (upstream's scripts give each role its folder). Its trace is the same process's, so it is a copy."""
    if not hybrid:
        return ()
    section = config.rollout.profiler
    rollout = role_profiler(rank, section, "rollout")
    if not rollout.check_this_rank():
        return ()
    if actor.check_this_rank() and section.save_path == config.actor.profiler.save_path:
        return ()
    return (rollout,)


class DistProfilerExtension:
    """Mixin: the worker group's start/stop of this rank's profiler. ``self.profiler`` defaults to a no-op;
    ``self.extra_profilers`` are more roles served by the same worker (the rollout beside the actor), started after
    it and stopped before it."""

    profiler: DistProfiler = DistProfiler(rank=0)
    extra_profilers: tuple[DistProfiler, ...] = ()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def start_profile(self, **kwargs: Any) -> None:
        """Start profiling this rank for the training step ``profile_step`` (its role decides whether it does)."""
        for profiler in (self.profiler, *self.extra_profilers):
            profiler.start(**kwargs)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def stop_profile(self) -> None:
        for profiler in (*reversed(self.extra_profilers), self.profiler):
            profiler.stop()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def run_profile_finish_hook(self) -> None:
        """After the run's last profiled step: each role's ``profiler.finish_hook_cmd``, on the ranks it selects."""
        for profiler in (self.profiler, *self.extra_profilers):
            profiler.run_finish_hook()
