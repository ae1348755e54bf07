"""The driver's side of ``global_profiler``: start the workers' profilers before a profiled training step and stop
them after it, as upstream's trainer does.

Without ``profile_continuous_steps`` each step in ``global_profiler.steps`` is its own trace; with it, a run of
consecutive steps ([2, 3, 4]) is one trace, started before the first and stopped after the last (or after the
run's last step). Each worker decides from its role's ``profiler`` section whether it records
(verl.workers.profiling); with ``global_profiler.tool`` null nothing is called.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from verl.utils.profiler.config import GlobalProfilerConfig

__all__ = ["profile_step", "starts_at", "stops_at"]


def starts_at(config: GlobalProfilerConfig, step: int) -> bool:
    if not config.profiled(step):
        return False
    return not (config.profile_continuous_steps and config.profiled(step - 1))


def stops_at(config: GlobalProfilerConfig, step: int, last_step: int) -> bool:
    if not config.profiled(step):
        return False
    return not (config.profile_continuous_steps and config.profiled(step + 1) and step < last_step)


def _worker_groups(trainer: Any) -> list[Any]:
    groups: list[Any] = []
    for name in ("actor_rollout_wg", "ref_policy_wg", "critic_wg", "rm_wg"):
        wg = getattr(trainer, name, None)
        if wg is not None and all(wg is not g for g in groups):  # LoRA: the ref group is the actor's
            groups.append(wg)
    return groups


@contextmanager
def profile_step(trainer: Any, step: int) -> Iterator[None]:
    """Around training step ``step`` of ``trainer`` (a RayPPOTrainer): the workers' start_profile / stop_profile."""
    config: GlobalProfilerConfig = trainer.config.global_profiler
    if config.tool is None or not config.steps:
        yield
        return
    if starts_at(config, step):
        for wg in _worker_groups(trainer):
            wg.start_profile(profile_step=step)
    yield
    if stops_at(config, step, trainer.total_training_steps):
        for wg in _worker_groups(trainer):
            wg.stop_profile()
