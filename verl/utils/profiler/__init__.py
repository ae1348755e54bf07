"""Upstream's profiler package: the config classes, ``DistProfiler`` (torch.profiler traces and CUDA memory
snapshots of the profiled training steps; docs/profiling.md) and the performance helpers."""

from verl.utils.profiler.config import (
    GlobalNsightToolConfig,
    GlobalProfilerConfig,
    GlobalToolConfig,
    GlobalTorchMemoryConfig,
    NPUToolConfig,
    NsightToolConfig,
    ProfilerConfig,
    ProfilerToolConfig,
    RoleProfilerConfig,
    RolloutProfilerConfig,
    TorchMemoryToolConfig,
    TorchProfilerToolConfig,
)
from verl.utils.profiler.profile import DistProfiler, mark_annotate, mark_end_range, mark_start_range

__all__ = ["ProfilerConfig", "RoleProfilerConfig", "RolloutProfilerConfig", "NsightToolConfig", "NPUToolConfig", "TorchProfilerToolConfig", "TorchMemoryToolConfig",
           "ProfilerToolConfig", "GlobalProfilerConfig", "GlobalNsightToolConfig", "GlobalToolConfig", "GlobalTorchMemoryConfig", "DistProfiler", "mark_start_range",
           "mark_end_range", "mark_annotate"]
