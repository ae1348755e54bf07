"""The profiler keys from the command line to their effect: which worker gets which section, which steps the
driver starts and stops, older upstream's spellings run as upstream ran them, and what is refused before Ray."""

from __future__ import annotations

import warnings

import pytest

from verl.trainer.config.validate import load_config, validate_config
from verl.trainer.ppo.profiling import profile_step, starts_at, stops_at
from verl.utils.config_errors import ConfigError
from verl.utils.profiler import GlobalProfilerConfig
from verl.utils.profiler.torch_profile import TorchProfiler

ARR = "actor_rollout_ref"
TORCH_STEP1 = ["global_profiler.tool=torch", "global_profiler.steps=[1]"]


def typed(*overrides: str):
    return validate_config(load_config(list(overrides)), check_files=False)


def refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        typed(*overrides)
    return str(info.value)


# -- the driver's schedule ------------------------------------------------------------------------------------------

class _Group:
    def __init__(self, name: str, log: list) -> None:
        self.name, self.log = name, log

    def start_profile(self, **kwargs) -> None:
        self.log.append((self.name, "start", kwargs["profile_step"]))

    def stop_profile(self) -> None:
        self.log.append((self.name, "stop"))

    def run_profile_finish_hook(self) -> None:
        self.log.append((self.name, "hook"))


class _Trainer:
    def __init__(self, config, total: int) -> None:
        self.config, self.total_training_steps, self.log = config, total, []
        self.actor_rollout_wg = _Group("actor", self.log)
        self.ref_policy_wg = self.actor_rollout_wg  # LoRA: the same group, called once
        self.critic_wg = _Group("critic", self.log)
        self.rm_wg = None

    def run(self) -> list:
        for step in range(1, self.total_training_steps + 1):
            with profile_step(self, step):
                self.log.append(("step", step))
        return self.log


def test_each_step_in_steps_is_its_own_trace():
    config = typed(*TORCH_STEP1[:1], "global_profiler.steps=[2,3]", f"{ARR}.actor.profiler.enable=true")
    log = _Trainer(config, 4).run()
    assert log == [("step", 1),
                   ("actor", "start", 2), ("critic", "start", 2), ("step", 2), ("actor", "stop"), ("critic", "stop"),
                   ("actor", "start", 3), ("critic", "start", 3), ("step", 3), ("actor", "stop"), ("critic", "stop"),
                   ("step", 4)]


def test_profile_continuous_steps_makes_consecutive_steps_one_trace():
    g = GlobalProfilerConfig(tool="torch", steps=[2, 3, 5, 6], profile_continuous_steps=True)
    assert [s for s in range(1, 8) if starts_at(g, s)] == [2, 5]
    assert [s for s in range(1, 6) if stops_at(g, s, last_step=5)] == [3, 5]  # the run ends at 5: stop there
    g = GlobalProfilerConfig(tool="torch", steps=[2, 3], profile_continuous_steps=False)
    assert [s for s in range(1, 5) if starts_at(g, s)] == [2, 3] == [s for s in range(1, 5) if stops_at(g, s, 4)]


def test_without_a_tool_or_steps_the_workers_are_not_called():
    assert [e for e in _Trainer(typed(), 3).run() if e[0] != "step"] == []


# -- which worker profiles with which section -----------------------------------------------------------------------

def test_each_worker_builds_its_roles_profiler(monkeypatch):
    from verl.workers import fsdp_workers

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    config = typed(*TORCH_STEP1, f"{ARR}.actor.profiler.enable=true", f"{ARR}.actor.profiler.save_path=/tmp/a",
                   f"{ARR}.ref.profiler.save_path=/tmp/r", "critic.profiler.ranks=[1]",
                   "global_profiler.save_path=/tmp/g")
    actor = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout")
    assert isinstance(actor.profiler.impl, TorchProfiler) and actor.profiler.impl.save_path == "/tmp/a"
    assert actor.profiler.impl.role == "actor_rollout" and actor.profiler.check_this_rank()
    ref = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "ref")
    assert not ref.profiler.check_this_rank()  # ref.profiler.enable is false
    critic = fsdp_workers.CriticWorker(config.critic)
    assert config.critic.profiler.save_path == "/tmp/g"  # follows global_profiler.save_path
    assert config.critic.profiler.tool == "torch" and not critic.profiler.check_this_rank()
    from verl.workers.reward_model_worker import RewardModelWorker

    config = typed(*TORCH_STEP1, "reward_model.enable=true", "reward_model.model.path=/x",
                   "reward_model.profiler.enable=true")
    rm = RewardModelWorker(config.reward_model)
    assert isinstance(rm.profiler.impl, TorchProfiler) and rm.profiler.impl.role == "reward_model"


def test_the_rollout_section_adds_its_own_copy_where_it_asks_for_more(monkeypatch, tmp_path):
    from verl.workers import fsdp_workers

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    # following the actor's section (the yaml's default): the actor's trace is the rollout's too, no second copy
    config = typed(*TORCH_STEP1, f"{ARR}.actor.profiler.enable=true")
    assert fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout").extra_profilers == ()
    # upstream's scripts: a folder per role; the worker's trace is written to both
    config = typed(*TORCH_STEP1, f"{ARR}.actor.profiler.enable=true", f"{ARR}.actor.profiler.save_path={tmp_path}/a",
                   f"{ARR}.rollout.profiler.save_path={tmp_path}/r")
    worker = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout")
    worker.start_profile(profile_step=1)
    worker.stop_profile()
    assert (tmp_path / "a/1/actor_rollout/prof_rank-0.json.gz").is_file()
    assert (tmp_path / "r/1/rollout/prof_rank-0.json.gz").is_file()
    # the rollout alone enabled: its worker records, under the rollout's name
    config = typed(*TORCH_STEP1, f"{ARR}.rollout.profiler.enable=true", f"global_profiler.save_path={tmp_path}/g")
    worker = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout")
    worker.start_profile(profile_step=2)
    worker.stop_profile()
    assert [p.relative_to(tmp_path).as_posix() for p in (tmp_path / "g").rglob("*.gz")] == [
        "g/2/rollout/prof_rank-0.json.gz"]


def test_the_rollout_and_reward_model_sections_follow_the_actors():
    config = typed(*TORCH_STEP1, f"{ARR}.actor.profiler.enable=true", f"{ARR}.actor.profiler.ranks=[0,1]",
                   f"{ARR}.actor.profiler.tool_config.torch.step_start=1")
    arr = config.actor_rollout_ref
    assert arr.rollout.profiler == arr.actor.profiler  # the rollout is profiled by the actor's worker
    assert config.reward_model.profiler.tool_config == arr.actor.profiler.tool_config
    assert config.reward_model.profiler.tool == "torch" and not config.reward_model.profiler.enable
    assert config.global_profiler.global_tool_config.torch_memory.trace_alloc_max_entries == 100_000
    c = typed("global_profiler.global_tool_config.torch_memory.trace_alloc_max_entries=5")
    assert c.actor_rollout_ref.actor.profiler.tool_config.torch_memory.trace_alloc_max_entries == 5
    assert c.critic.profiler.tool_config.torch_memory.trace_alloc_max_entries == 5


# -- older upstream's spellings -------------------------------------------------------------------------------------

def test_trainer_profile_steps_runs_as_global_profiler_steps_with_nsys():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        message = refusal("trainer.profile_steps=[1,2]", f"{ARR}.actor.profiler.ranks=[0]")
    assert "global_profiler.tool='nsys' is refused" in message  # nsys was its tool; no CUDA here
    (note,) = [str(w.message) for w in caught if "profile_steps" in str(w.message)]
    assert "global_profiler.steps=[1, 2]" in note and f"{ARR}.actor.profiler.enable=true" in note
    cfg = load_config(["trainer.profile_steps=[3]", "global_profiler.tool=torch", "critic.profiler.all_ranks=true"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = validate_config(cfg, check_files=False)
    assert config.global_profiler.steps == [3] and config.trainer.profile_steps is None
    assert config.critic.profiler.enable and config.global_profiler.tool == "torch"
    assert "differ" in refusal("trainer.profile_steps=[3]", "global_profiler.steps=[4]", *TORCH_STEP1[:1],
                               "critic.profiler.enable=true")


def test_profiler_discrete_is_the_nsys_option_and_refused_with_nsys():
    message = refusal(f"{ARR}.actor.profiler.discrete=true")
    assert f"{ARR}.actor.profiler.tool_config.nsys.discrete=True is refused" in message


# -- refused before Ray ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("overrides", "expected"), [
    (["global_profiler.tool=nsys"], "global_profiler.tool='nsys' is refused: Nsight Systems profiles CUDA work"),
    (["global_profiler.tool=npu"], "global_profiler.tool='npu' is refused: the Ascend NPU profiler needs an NPU"),
    (["global_profiler.tool=torch_memory"], "torch_memory snapshots the CUDA caching allocator and this machine has "
                                            "no CUDA GPU"),
    ([f"{ARR}.actor.profiler.tool=nsys"], f"{ARR}.actor.profiler.tool='nsys' is refused"),
    (["global_profiler.steps=[1]"], "with global_profiler.tool=null: nothing would be recorded"),
    (TORCH_STEP1, "but no role's profiler is enabled"),
    (["global_profiler.tool=torch", f"{ARR}.actor.profiler.enable=true"], "global_profiler.steps is null"),
    ([f"{ARR}.actor.profiler.enable=true", "global_profiler.steps=[1]"], "enable=true with no tool"),
    ([*TORCH_STEP1[:1], "global_profiler.steps=[0]", f"{ARR}.actor.profiler.enable=true"], "count from 1"),
    (["global_profiler.profile_continuous_steps=true"], "profile_continuous_steps=true, but global_profiler.steps"),
    ([*TORCH_STEP1, f"{ARR}.ref.profiler.enable=true"], "no reference policy"),
    ([*TORCH_STEP1, "critic.profiler.enable=true", "algorithm.adv_estimator=grpo"], "trains no critic"),
    ([*TORCH_STEP1, "reward_model.profiler.enable=true"], "reward_model.enable is off"),
    ([*TORCH_STEP1, f"{ARR}.actor.profiler.enable=true", "critic.profiler.enable=true",
      "critic.profiler.tool_config.torch.step_start=1"], "share one torch.profiler trace"),
    ([*TORCH_STEP1, f"{ARR}.actor.profiler.enable=true", f"{ARR}.rollout.profiler.enable=true",
      f"{ARR}.actor.profiler.tool_config.torch.step_end=2", "critic.profiler.enable=true"],
     "critic.profiler.tool_config.torch.step_start=0, step_end=None"),
    ([*TORCH_STEP1, f"{ARR}.actor.use_kl_loss=true", f"{ARR}.ref.profiler.enable=true",
      f"{ARR}.ref.profiler.tool_config.torch.step_end=2"], "runs no optimizer steps"),
    (["global_profiler.global_tool_config.torch_memory.stack_depth=8"], "has no stack-depth setting"),
    (["global_profiler.global_tool_config.nsys.worker_nsight_options.kill=sigkill"], "Nsight Systems profiling is "
                                                                                     "not built here"),
    ([f"{ARR}.actor.profiler.tool_config.npu.level=level2"], "the Ascend NPU profiler needs an NPU"),
])
def test_refused_before_ray(overrides, expected):
    assert expected in refusal(*overrides)


def test_the_defaults_and_a_torch_profile_are_accepted():
    assert typed().global_profiler == GlobalProfilerConfig()
    config = typed(*TORCH_STEP1, f"{ARR}.actor.profiler.enable=true", "critic.profiler.enable=true",
                   "critic.profiler.all_ranks=true", "global_profiler.profile_continuous_steps=true",
                   "critic.profiler.tool_config.torch.step_start=1", f"{ARR}.actor.profiler.tool_config.torch.step_start=1",
                   "reward_model.enable=true", "reward_model.model.path=/x", "reward_model.profiler.enable=true")
    assert config.critic.profiler.profiles_rank(7) and config.actor_rollout_ref.actor.profiler.profiles_rank(0)
