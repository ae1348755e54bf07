"""``DistProfiler``: a worker's profiler, whichever tool the config names, at upstream's path.

A worker builds one from its role's ``profiler`` section and keeps it as ``self.profiler``; the driver starts and
stops it around the profiled training steps (``start_profile`` / ``stop_profile``, verl.workers.profiling), and
``DistProfiler.annotate`` marks the worker methods whose work the trace names. With the defaults (no tool, or the
role not enabled) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable
from typing import Any

from verl.utils.profiler.config import GlobalToolConfig, ProfilerConfig, ProfilerToolConfig
from verl.utils.profiler.torch_memory import TorchMemoryProfiler
from verl.utils.profiler.torch_profile import TorchProfiler, annotate_call

__all__ = ["DistProfiler", "mark_start_range", "mark_end_range", "mark_annotate"]

logger = logging.getLogger(__name__)


class _NoOpProfiler:
    this_rank = False

    def start(self, **_: Any) -> None:
        return None

    def stop(self) -> None:
        return None


class DistProfiler:
    """Dispatches to the tool's profiler (torch, torch_memory); a no-op without a tool or when not enabled.

    ``nsys`` and ``npu`` are refused before Ray starts (verl.trainer.config.profiler_checks); built here directly
    they raise ValueError.
    """

    def __init__(self, rank: int, config: ProfilerConfig | None = None, tool_config: Any = None,
                 role: str = "worker", global_tool_config: GlobalToolConfig | None = None, **_: Any) -> None:
        config = config or ProfilerConfig()
        self.rank = rank
        self.role = role
        self.config = config
        tools = config.tool_config or ProfilerToolConfig()
        tool = config.tool if config.enable else None
        if tool == "torch":
            self.impl: Any = TorchProfiler(rank, config, tool_config or tools.torch, role)
        elif tool == "torch_memory":
            gtc = global_tool_config or GlobalToolConfig()
            self.impl = TorchMemoryProfiler(rank, config, tool_config or tools.torch_memory, role, gtc.torch_memory)
        elif tool in ("nsys", "npu"):
            raise ValueError(f"profiler tool {tool!r} is not built here (see docs/profiling.md); use tool=torch")
        else:
            self.impl = _NoOpProfiler()

    def check_this_rank(self) -> bool:
        return bool(self.impl.this_rank)

    def start(self, **kwargs: Any) -> None:
        """Start profiling this rank for the step ``profile_step`` (kwarg), when the role is enabled on it."""
        self.impl.start(**kwargs)

    def stop(self) -> None:
        self.impl.stop()

    def run_finish_hook(self) -> int | None:
        """Run the role's ``finish_hook_cmd`` through the shell on this rank (the driver calls it once, after the
        run's last profiled step), when the role is profiled and the rank is selected (``finish_hook_all_ranks``,
        else ``finish_hook_ranks``, else the profiled ranks). Returns the command's exit status, None when it did not
        run. A failing command is logged, not raised: the traces are written and training goes on."""
        config = self.config
        if not (config.enable and config.tool) or not config.runs_finish_hook(self.rank):
            return None
        env = {**os.environ, "VERL_PROFILE_SAVE_PATH": str(config.save_path or ""),
               "VERL_PROFILE_TOOL": str(config.tool), "VERL_PROFILE_RANK": str(self.rank),
               "VERL_PROFILE_PID": str(os.getpid()), "VERL_PROFILE_ROLE": self.role}
        result = subprocess.run(config.finish_hook_cmd, shell=True, env=env, check=False)
        if result.returncode != 0:
            logger.warning("[Profiler] rank %d: %s's finish_hook_cmd %r exited with status %d", self.rank, self.role,
                           config.finish_hook_cmd, result.returncode)
        return result.returncode

    @staticmethod
    def annotate(message: str | None = None, color: str | None = None, domain: str | None = None,
                 category: str | None = None, optimizer_attr: str | None = None,
                 **_: Any) -> Callable[[Callable], Callable]:
        """Decorate a worker method: while a trace is recorded it appears as the range ``<role>/<message>``
        (message: the method's name by default). ``optimizer_attr`` names the worker attribute holding the
        optimizer the method steps, for tool_config.torch.step_start / step_end. ``color``, ``domain`` and
        ``category`` are nsys's range styling, accepted for upstream's call sites."""
        return annotate_call(message, optimizer_attr)


def mark_start_range(message: str | None = None, color: str | None = None, domain: str | None = None,
                     category: str | None = None) -> None:
    """An nsys range start in upstream; no range tool is built here, so nothing is marked."""
    return None


def mark_end_range(range_id: Any) -> None:
    return None


def mark_annotate(message: str | None = None, color: str | None = None, domain: str | None = None,
                  category: str | None = None) -> Callable[[Callable], Callable]:
    def decorator(func: Callable) -> Callable:
        return func

    return decorator
