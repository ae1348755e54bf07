"""Upstream's profiler package; here only its config class (the per-step profiler integration is not built:
``trainer.profile_steps`` is refused before Ray starts)."""

from verl.utils.profiler.config import ProfilerConfig

__all__ = ["ProfilerConfig"]
