"""The driver's side of ``global_profiler``: start the workers' profilers before a profiled training step and stop
them after it, as upstream's trainer does.

Without ``profile_continuous_steps`` each step in ``global_profiler.steps`` is its own trace; with it, a run of
consecutive steps ([2, 3, 4]) is one trace, started before the first and stopped after the last (or after the
run's last step). Each worker decides from its role's ``profiler`` section whether it records
(verl.workers.profiling); with ``global_profiler.tool`` null nothing is called.

After the run's last profiled step (the largest of ``steps`` the run reaches), when a role's profiler has a
``finish_hook_cmd``, the workers run it once (``run_profile_finish_hook``), after that step's traces are written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from verl.utils.profiler.config import GlobalProfilerConfig

__all__ = ["profile_step", "starts_at", "stops_at", "last_profiled_step"]

_HOOKED_SECTIONS = (("actor_rollout_ref", "actor"), ("actor_rollout_ref", "rollout"), ("actor_rollout_ref", "ref"),
                    ("critic",), ("reward_model",))


def starts_at(config: GlobalProfilerConfig, step: int) -> bool:
    if not config.profiled(step):
        return False
    return not (config.profile_continuous_steps and config.profiled(step - 1))


def stops_at(config: GlobalProfilerConfig, step: int, last_step: int) -> bool:
    if not config.profiled(step):
        return False
    return not (config.profile_continuous_steps and config.profiled(step + 1) and step < last_step)


def last_profiled_step(config: GlobalProfilerConfig, last_step: int) -> int | None:
    """The last training step the run profiles: the largest of ``steps`` not after ``last_step``."""
    reached = [s for s in (config.steps or []) if s <= last_step]
    return max(reached) if reached else None


def _finish_hook_wanted(config: Any) -> bool:
    for path in _HOOKED_SECTIONS:
        section = config
        for name in path:
            section = getattr(section, name, None)
        if getattr(getattr(section, "profiler", None), "finish_hook_cmd", None):
            return True
    return False


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
        if step == last_profiled_step(config, trainer.total_training_steps) and _finish_hook_wanted(trainer.config):
            for wg in _worker_groups(trainer):
                wg.run_profile_finish_hook()
