"""Checks of ``global_profiler`` and the roles' ``profiler`` sections, before Ray starts (docs/profiling.md).

A profiler setting either records something or is refused: a tool this machine cannot run (nsys, npu and Ascend's
precision_debugger are not built; torch_memory needs CUDA), steps without a tool or without an enabled role, a role
enabled for a worker the run does not have, and a torch step window where no update runs or that two roles of one
trace would both set.
"""

from __future__ import annotations

import inspect
import shutil

import torch

from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.utils.profiler.config import PRECISION_DEBUGGER_REFUSAL, ProfilerConfig, TorchProfilerToolConfig

__all__ = ["check_profiler", "profiler_roles"]

ARR = "actor_rollout_ref"
_WHAT_TO_DO = "Use global_profiler.tool=torch (any machine), or leave the tool null."


def profiler_roles(cfg: PPOTrainerConfig) -> list[tuple[str, ProfilerConfig, bool]]:
    """(key, section, whether the run has that worker) of every role's profiler."""
    rm = cfg.reward_model
    return [
        (f"{ARR}.actor.profiler", cfg.actor_rollout_ref.actor.profiler, True),
        (f"{ARR}.rollout.profiler", cfg.actor_rollout_ref.rollout.profiler, True),  # in the actor's worker
        (f"{ARR}.ref.profiler", cfg.actor_rollout_ref.ref.profiler, cfg.use_reference_policy and not cfg.ref_in_actor),
        ("critic.profiler", cfg.critic.profiler, cfg.use_critic),
        ("reward_model.profiler", rm.profiler, rm.enable and not rm.rollout.name),
    ]


def check_profiler(cfg: PPOTrainerConfig) -> list[str]:
    g = cfg.global_profiler
    problems = _tool_problems(cfg)
    roles = profiler_roles(cfg)
    enabled = [(key, p) for key, p, present in roles if p.enable and present]
    for key, p, present in roles:
        if p.enable and not present:
            problems.append(f"{key}.enable=true, but this run has no such worker ({_absent_why(key, cfg)}); set "
                            f"{key}.enable=false.")
        if p.enable and p.tool is None:
            problems.append(f"{key}.enable=true with no tool: set global_profiler.tool=torch (or {key}.tool).")
    if cfg.trainer.profile_steps is not None:  # left by deprecated.fold_profile_steps only when both differ
        problems.append(f"trainer.profile_steps={cfg.trainer.profile_steps} (older upstream's spelling) and "
                        f"global_profiler.steps={g.steps} differ; give global_profiler.steps only.")
    if g.profile_continuous_steps and not g.steps:
        problems.append("global_profiler.profile_continuous_steps=true, but global_profiler.steps is null; name the "
                        "steps (e.g. global_profiler.steps=[2,3,4]) or leave it false.")
    bad_steps = [s for s in g.steps or [] if s < 1]
    if bad_steps:
        problems.append(f"global_profiler.steps={g.steps}: training steps count from 1; remove {bad_steps}.")
    if g.steps and g.tool is None and not any(p.tool for _, p in enabled):
        problems.append(f"global_profiler.steps={g.steps} with global_profiler.tool=null: nothing would be recorded; "
                        "set global_profiler.tool=torch.")
    elif g.steps and not enabled:
        problems.append(f"global_profiler.steps={g.steps}, but no role's profiler is enabled: nothing would be "
                        f"recorded; set e.g. {ARR}.actor.profiler.enable=true.")
    for key, _ in enabled:
        if not g.steps:
            problems.append(f"{key}.enable=true, but global_profiler.steps is null: name the steps to profile, e.g. "
                            "global_profiler.steps=[1].")
            break
    problems += _window_problems(cfg, enabled)
    problems += _torch_option_problems(cfg, enabled)
    return problems


def _absent_why(key: str, cfg: PPOTrainerConfig) -> str:
    if key.startswith(f"{ARR}.ref"):
        if cfg.ref_in_actor:
            return f"with LoRA the reference pass runs in the actor's worker, profiled by {ARR}.actor.profiler"
        return "no reference policy: use_kl_loss and use_kl_in_reward are off"
    if key.startswith("critic"):
        return f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} trains no critic"
    return "reward_model.enable is off, or the reward model is a judge engine (reward_model.rollout.name)"


def _tool_problems(cfg: PPOTrainerConfig) -> list[str]:
    g = cfg.global_profiler.tool
    tools = [("global_profiler.tool", g)]
    # a role's tool follows the global one: named only where it was set to another
    tools += [(f"{key}.tool", p.tool) for key, p, _ in profiler_roles(cfg) if p.tool != g]
    problems = []
    for key, tool in tools:
        why = _hardware_refusal(tool, cfg.trainer.device) if tool else None
        if why:
            problems.append(f"{key}={tool!r} is refused: {why}. {_WHAT_TO_DO}")
    if any(tool == "torch_memory" for _, tool in tools):
        problems += _record_kwargs_problems(cfg)
    return problems


def _hardware_refusal(tool: str, device: str) -> str | None:
    cuda = torch.cuda.is_available() and device != "cpu"
    if tool == "precision_debugger":
        return PRECISION_DEBUGGER_REFUSAL[0]
    if tool == "npu":
        return "the Ascend NPU profiler needs an NPU and torch_npu; this package runs on CUDA and CPU only"
    if tool == "nsys":
        if not cuda:
            return "Nsight Systems profiles CUDA work and this machine has no CUDA GPU (or trainer.device=cpu)"
        if shutil.which("nsys") is None:
            return "the nsys binary is not on PATH"
        return "Nsight Systems profiling is not built here (the workers are not started under nsys)"
    if tool == "torch_memory" and not cuda:
        return ("torch_memory snapshots the CUDA caching allocator and this machine has no CUDA GPU (or "
                "trainer.device=cpu)")
    return None


def _record_kwargs_problems(cfg: PPOTrainerConfig) -> list[str]:
    known = set(inspect.signature(torch.cuda.memory._record_memory_history).parameters)
    ours = {"enabled", "context", "stacks", "max_entries"}
    extra = cfg.global_profiler.global_tool_config.torch_memory.kw_args
    bad = sorted(set(extra) - (known - ours))
    if bad:
        return [f"global_profiler.global_tool_config.torch_memory.kw_args has {bad}, which "
                f"torch.cuda.memory._record_memory_history does not take (or which other keys set); it takes "
                f"{sorted(known - ours)}."]
    return []


def _window_problems(cfg: PPOTrainerConfig, enabled: list[tuple[str, ProfilerConfig]]) -> list[str]:
    """tool_config.torch's window belongs to the trace's opener and counts the optimizer steps of the process's
    updates: refused on a role without an update that set its own, and where enabled roles sharing a trace set
    different ones (the sections following the actor's carry its window: no conflict)."""
    actor_window = _window(cfg.actor_rollout_ref.actor.profiler)
    windows = {key: _window(p) for key, p in enabled if p.tool == "torch"}
    problems = []
    for key, window in windows.items():
        if window.whole_step or window == actor_window:
            continue
        if key.startswith((f"{ARR}.ref", "reward_model")):
            problems.append(f"{_where(key, window)}: this role runs no optimizer steps, so the window would record "
                            "nothing; leave step_start=0 and step_end=null.")
    if len(set(map(_window_key, windows.values()))) > 1:
        listed = "; ".join(_where(k, w) for k, w in windows.items())
        problems.append(f"{listed}: the roles of one worker process share one torch.profiler trace, whose window is "
                        "its opener's; give the enabled roles the same window, or enable one role.")
    return problems


def _window(p: ProfilerConfig) -> TorchProfilerToolConfig:
    return p.tool_config.torch if p.tool_config is not None else TorchProfilerToolConfig()


def _window_key(w: TorchProfilerToolConfig) -> tuple[int, int | None]:
    return w.step_start, w.step_end


def _where(key: str, w: TorchProfilerToolConfig) -> str:
    return f"{key}.tool_config.torch.step_start={w.step_start}, step_end={w.step_end}"


def _torch_option_problems(cfg: PPOTrainerConfig, enabled: list[tuple[str, ProfilerConfig]]) -> list[str]:
    """tool_config.torch.contents / discrete: what a GPU-less run cannot record, a stage trace with an optimizer-step
    window, and enabled roles (which may share a worker process and its one trace) that ask for different ones."""
    torch_roles = {key: _window(p) for key, p in enabled if p.tool == "torch"}
    cuda = torch.cuda.is_available() and cfg.trainer.device != "cpu"
    problems = []
    for key, t in torch_roles.items():
        if "cuda" in t.contents and not cuda:
            problems.append(f"{key}.tool_config.torch.contents={list(t.contents)} names 'cuda', but this machine has "
                            "no CUDA GPU (or trainer.device=cpu); remove 'cuda' (cpu is recorded either way).")
        if t.discrete and not t.whole_step:
            problems.append(f"{key}.tool_config.torch.discrete=true records each stage whole, so its step_start="
                            f"{t.step_start} / step_end={t.step_end} window has nothing to narrow; set discrete=false "
                            "or leave step_start=0 and step_end=null.")
    for name in ("contents", "discrete"):
        values = {key: getattr(t, name) for key, t in torch_roles.items()}
        if len({str(sorted(v) if name == "contents" else v) for v in values.values()}) > 1:
            listed = "; ".join(f"{key}.tool_config.torch.{name}={v}" for key, v in values.items())
            problems.append(f"{listed}: the enabled roles of one worker process share its torch.profiler, so they "
                            f"must ask for the same {name}; give them the same value, or enable one role.")
    return problems
