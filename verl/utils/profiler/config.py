"""The profiler's typed config, at upstream's path ``verl.utils.profiler.config``.

A role's ``profiler`` section (``actor_rollout_ref.actor.profiler``, ``ref``, ``rollout``, ``critic``,
``reward_model``) and the run's ``global_profiler`` are both ``ProfilerConfig``, as in upstream's yaml: the global
one carries ``steps``, ``profile_continuous_steps`` and ``global_tool_config``; a role's carries ``enable``, the
ranks and ``tool_config``. What each tool does here (``torch`` everywhere, ``torch_memory`` on CUDA, ``nsys`` and
``npu`` refused) is docs/profiling.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from verl.base_config import BaseConfig
from verl.utils.config_schema import at_least, choice, dict_field, list_field, refused

__all__ = ["TOOLS", "NsightToolConfig", "GlobalNsightToolConfig", "GlobalProfilerConfig", "NPUToolConfig", "TorchProfilerToolConfig", "TorchMemoryToolConfig",
           "PrecisionDebuggerToolConfig", "GlobalPrecisionDebuggerToolConfig", "PRECISION_DEBUGGER_REFUSAL",
           "ProfilerToolConfig", "GlobalTorchMemoryConfig", "GlobalToolConfig", "ProfilerConfig", "RoleProfilerConfig",
           "RolloutNPUToolConfig", "RolloutTorchProfilerToolConfig", "RolloutProfilerToolConfig",
           "RolloutProfilerConfig", "RELOCATE_NOTE"]

# precision_debugger (upstream after v0.7) is named so that it is refused with its reason, not as an unknown tool
TOOLS = ("nsys", "npu", "torch", "torch_memory", "precision_debugger")
TORCH_CONTENTS = ("cuda", "cpu", "memory", "shapes", "stack")
DEFAULT_SAVE_PATH = "outputs/profile"

_NSYS = ("Nsight Systems profiling is not built here: it needs the workers started under nsys (Ray's nsight "
         "runtime_env) on a CUDA machine", "Leave it at its default; profile with global_profiler.tool=torch.")
_NPU = ("the Ascend NPU profiler needs an NPU and torch_npu, which this build does not support",
        "Leave it at its default; profile with global_profiler.tool=torch.")
PRECISION_DEBUGGER_REFUSAL = (
    "upstream's precision_debugger tool runs Ascend's msprobe PrecisionDebugger (the mindstudio-probe package) "
    "around the chosen stages to dump tensors for accuracy comparison on Ascend NPUs; msprobe, torch_npu and NPU "
    "support are not part of this build",
    "Leave the precision_debugger keys at their defaults and global_profiler.tool off precision_debugger; profile "
    "with global_profiler.tool=torch.",
)
_PD_GLOBAL = "global_profiler.global_tool_config.precision_debugger."
_STACK_DEPTH = ("torch.cuda.memory._record_memory_history (torch 2.13) has no stack-depth setting",
                "Leave it at 32; global_tool_config.torch_memory.stacks=python records Python frames only.")
_TOKEN_WINDOW = (
    "upstream windows the rollout engine's own profiler (vLLM / SGLang's start_profile) by response-token index; "
    "here the rollout runs in the actor's worker and is recorded by that worker's torch trace, whose window is the "
    "training step (or tool_config.torch.step_start / step_end), and no per-token start or stop is built",
    "Leave profile_token_start / profile_token_end null (the whole generation is recorded).",
)
RELOCATE_NOTE = ("moves nsys reports (from Ray's fixed nsight folder) and the rollout engines' own traces (from "
                  "per-replica folders) into save_path; neither is written here (nsys is refused, and the rollout is "
                  "traced by the actor worker's torch profiler), and every trace here is written under save_path "
                  "already (<save_path>/<step>/<role>/)")
_NSIGHT_OPTIONS = {"trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph"}


@dataclass
class NsightToolConfig(BaseConfig):
    """A role's ``tool_config.nsys``."""

    discrete: bool = refused(False, *_NSYS)  # one database per task instead of one per step


@dataclass
class GlobalNsightToolConfig(NsightToolConfig):
    """``global_profiler.global_tool_config.nsys``: also nsys's launch options for the driver and the workers."""

    _target_aliases: ClassVar[tuple[str, ...]] = ("verl.utils.profiler.config.NsightToolConfig",)

    controller_nsight_options: dict[str, Any] = refused(dict_field(_NSIGHT_OPTIONS), *_NSYS)
    worker_nsight_options: dict[str, Any] = refused(
        dict_field({**_NSIGHT_OPTIONS, "capture-range": "cudaProfilerApi", "capture-range-end": None,
                    "kill": "none"}), *_NSYS)


@dataclass
class NPUToolConfig(BaseConfig):
    """``tool_config.npu``: the Ascend profiler's options (upstream's yaml defaults)."""

    contents: list[str] = refused(list_field([]), *_NPU)  # npu, cpu, memory, shapes, module, stack
    level: str = refused("level1", *_NPU)  # level_none | level0 | level1 | level2
    analysis: bool = refused(True, *_NPU)
    discrete: bool = refused(False, *_NPU)


@dataclass
class TorchProfilerToolConfig(BaseConfig):
    """``tool_config.torch``: what a profiled step's trace holds (``contents``), whether each stage gets a trace
    of its own (``discrete``), and which optimizer steps of the role's update it records (older upstream's window).

    Upstream: "step_start: start step in update_policy; step_end: end step". Counted from 0 over the optimizer
    steps of one update call (epochs x mini-batches). The defaults (0, null) record the whole training step;
    otherwise the trace holds optimizer steps step_start .. step_end - 1 (null: to the end of the update).
    """

    step_start: int = 0
    step_end: int | None = None
    # upstream v0.7: what the trace holds (cpu, cuda: torch.profiler activities; shapes: record_shapes; memory:
    # profile_memory; stack: with_stack); empty: cpu and cuda (where there is a GPU), nothing more
    contents: list[str] = list_field([], TORCH_CONTENTS)
    discrete: bool = False  # one trace per annotated stage (each worker call) instead of one per profiled step

    def __post_init__(self) -> None:
        if not isinstance(self.contents, (list, tuple)):  # AssertionError as upstream
            raise AssertionError(f"Profiler contents must be of type list, got {type(self.contents)}")
        bad = [c for c in self.contents if c not in TORCH_CONTENTS]
        if bad:
            raise AssertionError(f"Profiler contents only supports {list(TORCH_CONTENTS)}, but gets {bad[0]}")
        if self.step_start < 0:
            raise ValueError(f"tool_config.torch.step_start must be >= 0, got {self.step_start}")
        if self.step_end is not None and self.step_end <= self.step_start:
            raise ValueError(f"tool_config.torch.step_end ({self.step_end}) must be greater than step_start "
                             f"({self.step_start}), or null")

    @property
    def whole_step(self) -> bool:
        return self.step_start == 0 and self.step_end is None


@dataclass
class TorchMemoryToolConfig(BaseConfig):
    """``tool_config.torch_memory``: CUDA allocator history kept for the step's memory snapshot."""

    trace_alloc_max_entries: int = at_least(100_000, 1)
    stack_depth: int = refused(32, *_STACK_DEPTH)


@dataclass
class PrecisionDebuggerToolConfig(BaseConfig):
    """A role's ``tool_config.precision_debugger`` (msprobe's options; refused unless at their defaults). Its keys
    follow the global section's in the yaml, so a value set there alone is reported there only."""

    config_path: str | None = refused(None, *PRECISION_DEBUGGER_REFUSAL, follows=_PD_GLOBAL + "config_path")
    steps: list[int] | None = refused(None, *PRECISION_DEBUGGER_REFUSAL)  # upstream: deprecated, ignored
    stages: list[str] | None = refused(None, *PRECISION_DEBUGGER_REFUSAL, follows=_PD_GLOBAL + "stages")
    strict: bool = refused(False, *PRECISION_DEBUGGER_REFUSAL, follows=_PD_GLOBAL + "strict")


@dataclass
class GlobalPrecisionDebuggerToolConfig(BaseConfig):
    """``global_profiler.global_tool_config.precision_debugger``: msprobe's config file, the stages it wraps and
    whether an unknown stage fails. Refused unless at its defaults (PRECISION_DEBUGGER_REFUSAL)."""

    _target_aliases: ClassVar[tuple[str, ...]] = ("verl.utils.profiler.config.PrecisionDebuggerToolConfig",)

    config_path: str | None = refused(None, *PRECISION_DEBUGGER_REFUSAL)
    steps: list[int] | None = refused(None, *PRECISION_DEBUGGER_REFUSAL)
    stages: list[str] | None = refused(None, *PRECISION_DEBUGGER_REFUSAL)
    strict: bool = refused(False, *PRECISION_DEBUGGER_REFUSAL)


@dataclass
class ProfilerToolConfig(BaseConfig):
    """A role's ``tool_config``: one section per tool (upstream keeps it untyped)."""

    nsys: NsightToolConfig = field(default_factory=NsightToolConfig)
    npu: NPUToolConfig = field(default_factory=NPUToolConfig)
    torch: TorchProfilerToolConfig = field(default_factory=TorchProfilerToolConfig)
    torch_memory: TorchMemoryToolConfig = field(default_factory=TorchMemoryToolConfig)
    precision_debugger: PrecisionDebuggerToolConfig = field(default_factory=PrecisionDebuggerToolConfig)


def _same_values(a: Any, b: Any) -> bool:
    """Field-by-field equality of a rollout section and the role section it extends; a field only one of them has
    counts as null on the other (the token window's default)."""
    names = {f.name for f in dataclasses.fields(a)} | {f.name for f in dataclasses.fields(b)}
    return all(getattr(a, n, None) == getattr(b, n, None) for n in names)


# The rollout's sections below compare equal to the actor's when their values agree (eq=False keeps this __eq__):
# the rollout runs in the actor's worker, and a section that follows the actor's is the same profiler.
@dataclass(eq=False)
class RolloutNPUToolConfig(NPUToolConfig):
    """The rollout's ``tool_config.npu``: also upstream's response-token window (after v0.7), refused."""

    _target_aliases: ClassVar[tuple[str, ...]] = ("verl.utils.profiler.config.NPUToolConfig",)

    profile_token_start: int | None = refused(None, *_NPU)
    profile_token_end: int | None = refused(None, *_NPU)

    def __eq__(self, other: object) -> bool:
        return _same_values(self, other) if isinstance(other, NPUToolConfig) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


@dataclass(eq=False)
class RolloutTorchProfilerToolConfig(TorchProfilerToolConfig):
    """The rollout's ``tool_config.torch``: also upstream's response-token window (after v0.7), refused."""

    _target_aliases: ClassVar[tuple[str, ...]] = ("verl.utils.profiler.config.TorchProfilerToolConfig",)

    profile_token_start: int | None = refused(None, *_TOKEN_WINDOW)  # from this response token (null: the first)
    profile_token_end: int | None = refused(None, *_TOKEN_WINDOW)  # up to this one, exclusive (null: the end)

    def __eq__(self, other: object) -> bool:
        return _same_values(self, other) if isinstance(other, TorchProfilerToolConfig) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


@dataclass(eq=False)
class RolloutProfilerToolConfig(ProfilerToolConfig):
    """The rollout's ``tool_config``: its npu and torch sections carry the token window."""

    npu: RolloutNPUToolConfig = field(default_factory=RolloutNPUToolConfig)
    torch: RolloutTorchProfilerToolConfig = field(default_factory=RolloutTorchProfilerToolConfig)

    def __eq__(self, other: object) -> bool:
        return _same_values(self, other) if isinstance(other, ProfilerToolConfig) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


@dataclass
class GlobalTorchMemoryConfig(BaseConfig):
    """``global_profiler.global_tool_config.torch_memory``: torch.cuda.memory._record_memory_history's arguments."""

    trace_alloc_max_entries: int = at_least(100_000, 1)  # the roles' tool_config.torch_memory follow it
    stack_depth: int = refused(32, *_STACK_DEPTH)
    context: str = choice("all", ("state", "alloc", "all"))
    stacks: str = choice("all", ("python", "all"))
    kw_args: dict[str, Any] = dict_field()


@dataclass
class GlobalToolConfig(BaseConfig):
    nsys: GlobalNsightToolConfig = field(default_factory=GlobalNsightToolConfig)
    torch_memory: GlobalTorchMemoryConfig = field(default_factory=GlobalTorchMemoryConfig)
    precision_debugger: GlobalPrecisionDebuggerToolConfig = field(default_factory=GlobalPrecisionDebuggerToolConfig)


@dataclass
class ProfilerConfig(BaseConfig):
    """A role's profiler (``<role>.profiler``), as upstream's class.

    Args:
        tool: nsys | npu | torch | torch_memory | precision_debugger (refused); null: no profiler. Follows
            global_profiler.tool in the yaml.
        enable: profile this role in the steps global_profiler.steps names.
        all_ranks: profile every rank of the role; else ``ranks`` (empty: rank 0, as upstream).
        ranks: the ranks to profile.
        save_path: where traces go (follows global_profiler.save_path).
        tool_config: the per-tool options.
    """

    tool: str | None = choice(None, TOOLS)
    enable: bool = False
    all_ranks: bool = False
    ranks: list[int] = field(default_factory=list)
    save_path: str | None = DEFAULT_SAVE_PATH
    tool_config: ProfilerToolConfig | None = field(default_factory=ProfilerToolConfig)

    def __post_init__(self) -> None:
        if not isinstance(self.ranks, (list, tuple, set)):
            # AssertionError as upstream, so code written against it still catches it
            raise AssertionError(f"ProfilerConfig.ranks must be a list of ranks, got {type(self.ranks).__name__} "
                                 f"{self.ranks!r}")

    def profiles_rank(self, rank: int) -> bool:
        """Whether ``rank`` is profiled when the role is enabled (upstream: no ranks given means rank 0)."""
        if self.all_ranks:
            return True
        return rank in self.ranks if self.ranks else rank == 0

    def runs_finish_hook(self, rank: int) -> bool:
        """Whether ``rank`` runs a finish hook: never here; RoleProfilerConfig (the roles with upstream's
        finish-hook keys) says otherwise."""
        return False

    def union(self, other: ProfilerConfig) -> ProfilerConfig:
        """Profile what either config profiles."""
        return dataclasses.replace(self, tool=self.tool or other.tool, enable=self.enable or other.enable,
                                   all_ranks=self.all_ranks or other.all_ranks,
                                   ranks=sorted(set(self.ranks) | set(other.ranks)),
                                   save_path=self.save_path or other.save_path)

    def intersect(self, other: ProfilerConfig) -> ProfilerConfig:
        """Profile only what both configs profile."""
        return dataclasses.replace(self, tool=self.tool if self.tool == other.tool else None,
                                   enable=self.enable and other.enable, all_ranks=self.all_ranks and other.all_ranks,
                                   ranks=sorted(set(self.ranks) & set(other.ranks)),
                                   save_path=self.save_path if self.save_path == other.save_path else None)


@dataclass
class RoleProfilerConfig(ProfilerConfig):
    """The profiler of the actor, reference, rollout and critic: ProfilerConfig with upstream's finish-hook keys
    (after v0.7), which the yaml makes follow global_profiler's (the rollout's follow the actor's). Upstream's yaml
    names ``verl.utils.profiler.ProfilerConfig`` for these sections; the reward model's has no such keys."""

    _target_aliases: ClassVar[tuple[str, ...]] = ("verl.utils.profiler.ProfilerConfig",
                                                  "verl.utils.profiler.config.ProfilerConfig")

    relocate_results: bool = False  # accepted with a note (RELOCATE_NOTE)
    finish_hook_cmd: str | None = None
    finish_hook_all_ranks: bool = False
    finish_hook_ranks: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.finish_hook_ranks, (list, tuple, set)):
            raise AssertionError(f"ProfilerConfig.finish_hook_ranks must be a list of ranks, got "
                                 f"{type(self.finish_hook_ranks).__name__} {self.finish_hook_ranks!r}")

    def runs_finish_hook(self, rank: int) -> bool:
        """Whether ``rank`` runs ``finish_hook_cmd`` (upstream: every rank with finish_hook_all_ranks, else
        finish_hook_ranks, else the profiled ranks)."""
        if not self.finish_hook_cmd:
            return False
        if self.finish_hook_all_ranks:
            return True
        return rank in self.finish_hook_ranks if self.finish_hook_ranks else self.profiles_rank(rank)


@dataclass(eq=False)
class RolloutProfilerConfig(RoleProfilerConfig):
    """``actor_rollout_ref.rollout.profiler``: a role's, with the rollout's tool_config (the token window)."""

    tool_config: RolloutProfilerToolConfig | None = field(default_factory=RolloutProfilerToolConfig)

    def __eq__(self, other: object) -> bool:
        return _same_values(self, other) if isinstance(other, ProfilerConfig) else NotImplemented

    __hash__ = None  # type: ignore[assignment]


@dataclass
class GlobalProfilerConfig(BaseConfig):
    """``global_profiler``: which training steps are profiled and with which tool; the roles say who.

    Upstream's yaml names ``verl.utils.profiler.ProfilerConfig`` for this section, which upstream never builds
    into that class (it has no ``steps``); here it is built as this one.

    Args:
        tool: the tool every role's ``profiler.tool`` follows; null: no profiling.
        steps: the training steps to profile, counted from 1; null: none.
        profile_continuous_steps: consecutive steps in ``steps`` share one trace (started at the first, stopped
            after the last) instead of one trace each.
        save_path: where traces go (the roles' save_path follow it).
        relocate_results: upstream moves nsys reports and rollout-engine traces into save_path; accepted with
            a note here, where every trace is written under save_path already.
        finish_hook_cmd: a shell command each selected rank of a profiled role runs once, after the run's last
            profiled step (its traces are written by then), e.g. to upload save_path. It sees VERL_PROFILE_SAVE_PATH,
            VERL_PROFILE_TOOL, VERL_PROFILE_RANK, VERL_PROFILE_PID and VERL_PROFILE_ROLE. null: none.
        finish_hook_all_ranks: every rank of the role runs it.
        finish_hook_ranks: the ranks that run it; empty: the role's profiled ranks.
        global_tool_config: the tools' run-wide options.
    """

    _target_aliases: ClassVar[tuple[str, ...]] = ("verl.utils.profiler.ProfilerConfig",
                                                  "verl.utils.profiler.config.ProfilerConfig")

    tool: str | None = choice(None, TOOLS)
    steps: list[int] | None = None
    profile_continuous_steps: bool = False
    save_path: str = DEFAULT_SAVE_PATH
    # upstream after v0.7; the roles' profiler sections follow these four in the yaml
    relocate_results: bool = False
    finish_hook_cmd: str | None = None
    finish_hook_all_ranks: bool = False
    finish_hook_ranks: list[int] = field(default_factory=list)
    global_tool_config: GlobalToolConfig = field(default_factory=GlobalToolConfig)

    def profiled(self, step: int) -> bool:
        return bool(self.steps) and step in self.steps
