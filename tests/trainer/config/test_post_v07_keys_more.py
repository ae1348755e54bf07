"""More key groups of later upstream main (ETOgaosion/verl @ 2731ffb), declared with upstream's names and defaults:
trainer.use_v1 / trainer.v1, transfer_queue.metrics and backend.MooncakeStore, rollout.disaggregation,
algorithm.filter_groups.max_inflight_gen_batches, policy_loss.dro_beta, the profilers' finish-hook keys,
rollout.moe_load_balance_metrics_interval and the top-level `skip` section. Each is refused unless at its default,
except use_v1 and v1.trainer_mode=sync, which run this build's one trainer."""

from __future__ import annotations

import warnings

import pytest

from tests.utils.test_profiler_config import _Group  # the driver-schedule fake
from verl.trainer.config import ConfigError, ConfigWarning, load_config, validate_config
from verl.trainer.config.trainer import TrainerConfig, TransferQueueConfig

ARR = "actor_rollout_ref"


def _typed(*overrides: str):
    return validate_config(load_config(list(overrides)), check_files=False)


def _typed_with_notes(*overrides: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        typed = _typed(*overrides)
    return typed, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def _refusal(*overrides: str) -> str:
    with pytest.raises(ConfigError) as info:
        _typed(*overrides)
    return str(info.value)


# ------------------------------------------------------------------ trainer.use_v1 / trainer.v1


def test_trainer_v1_defaults_are_upstreams():
    trainer = _typed().trainer
    assert trainer.use_v1 is True and TrainerConfig().use_v1 is True
    v1 = trainer.v1
    assert (v1.trainer_mode, v1.sync) == ("sync", {})
    assert v1.colocate_async.num_warmup_batches == 1
    assert (v1.separate_async.num_warmup_batches, v1.separate_async.parameter_sync_step) == (1, 4)
    s = v1.sampler
    assert (s.max_off_policy_threshold, s.max_off_policy_strategy, s.sync_refill_failed_groups) == (8, "drop", False)
    assert (s.custom_sampler.path, s.custom_sampler.name, s.sampler_kwargs) == (None, None, {})


def test_use_v1_either_value_runs_the_one_trainer_with_a_note_for_false():
    typed, notes = _typed_with_notes("trainer.use_v1=true")
    assert typed.trainer.use_v1 is True and not [n for n in notes if "use_v1" in n]
    typed, notes = _typed_with_notes("trainer.use_v1=false")
    assert typed.trainer.use_v1 is False
    assert [n for n in notes if n.startswith("trainer.use_v1=false") and "one trainer" in n]


def test_v1_trainer_mode_sync_is_accepted_and_async_modes_are_refused():
    assert _typed("trainer.v1.trainer_mode=sync").trainer.v1.trainer_mode == "sync"
    for mode in ("colocate_async", "separate_async"):
        message = _refusal(f"trainer.v1.trainer_mode={mode}")
        assert f"trainer.v1.trainer_mode='{mode}' is refused" in message and "off-policy" in message
    assert "trainer.v1.trainer_mode" in _refusal("trainer.v1.trainer_mode=bogus")


@pytest.mark.parametrize("override", [
    "trainer.v1.colocate_async.num_warmup_batches=2",
    "trainer.v1.separate_async.parameter_sync_step=1",
    "trainer.v1.sampler.max_off_policy_threshold=2",
    "trainer.v1.sampler.max_off_policy_strategy=wait",
    "trainer.v1.sampler.sync_refill_failed_groups=true",
    "trainer.v1.sampler.custom_sampler.path=/tmp/sampler.py",
    "+trainer.v1.sampler.sampler_kwargs.k=1",
    "+trainer.v1.sync.k=1",
])
def test_every_other_v1_key_is_refused_unless_default(override):
    key = override.lstrip("+").split("=")[0]
    section = key.rsplit(".", 1)[0] if key.endswith(".k") else key
    message = _refusal(override)
    assert f"{section}=" in message and "is refused" in message and "trainer_mode=sync" in message


# ------------------------------------------------------------------ transfer_queue.metrics / MooncakeStore


def test_transfer_queue_new_keys_have_upstreams_defaults():
    tq = _typed().transfer_queue
    assert (tq.metrics.enabled, tq.metrics.port) == (False, 0)
    mc = tq.backend.MooncakeStore
    assert (mc.auto_init, mc.metadata_server, mc.master_server_address) == (False, "localhost:50123", "localhost:50124")
    assert (mc.local_hostname, mc.protocol, mc.device_name) == ("localhost", "tcp", "")
    assert (mc.global_segment_size, mc.local_buffer_size) == (4294967296, 1073741824)
    assert TransferQueueConfig().backend.MooncakeStore == mc


@pytest.mark.parametrize("override", [
    "transfer_queue.metrics.enabled=true", "transfer_queue.metrics.port=9100",
    "transfer_queue.backend.MooncakeStore.protocol=rdma", "transfer_queue.backend.MooncakeStore.auto_init=true",
])
def test_transfer_queue_metrics_and_mooncake_are_refused(override):
    key, value = override.split("=")
    message = _refusal(override)
    assert f"{key}=" in message and "is refused" in message and "TransferQueue" in message


# ------------------------------------------------------------------ rollout.disaggregation / moe metrics


def test_rollout_disaggregation_and_moe_metrics_have_upstreams_defaults():
    rollout = _typed().actor_rollout_ref.rollout
    d = rollout.disaggregation
    assert (d.enabled, d.prefill_replicas, d.decode_replicas, d.decode_tensor_model_parallel_size) == (
        False, 1, 1, None)
    assert (d.transfer_backend, d.bootstrap_port, d.ib_device) == ("nixl", None, None)
    assert rollout.moe_load_balance_metrics_interval == 0


@pytest.mark.parametrize("override", [
    f"{ARR}.rollout.disaggregation.enabled=true", f"{ARR}.rollout.disaggregation.prefill_replicas=2",
    f"{ARR}.rollout.disaggregation.transfer_backend=mooncake", f"{ARR}.rollout.disaggregation.ib_device=mlx5_0",
])
def test_rollout_disaggregation_is_refused(override):
    key = override.split("=")[0]
    message = _refusal(override)
    assert f"{key}=" in message and "is refused" in message and "prefill" in message


def test_moe_load_balance_metrics_are_refused():
    message = _refusal(f"{ARR}.rollout.moe_load_balance_metrics_interval=10")
    assert f"{ARR}.rollout.moe_load_balance_metrics_interval=10 is refused" in message and "MoE" in message


# ------------------------------------------------------------------ filter_groups / dro_beta


def test_filter_groups_target_names_our_class_and_inflight_batches_is_refused():
    from verl.trainer.config import FilterGroupsConfig

    cfg = load_config([])
    assert cfg.algorithm.filter_groups._target_ == "verl.trainer.config.FilterGroupsConfig"
    fg = _typed().algorithm.filter_groups
    assert isinstance(fg, FilterGroupsConfig) and fg.max_inflight_gen_batches == 1
    assert _typed("algorithm.filter_groups.max_inflight_gen_batches=1").algorithm.filter_groups.enable is False
    message = _refusal("algorithm.filter_groups.max_inflight_gen_batches=4")
    assert "algorithm.filter_groups.max_inflight_gen_batches=4 is refused" in message and "one batch" in message


def test_policy_loss_dro_beta_is_refused():
    assert _typed().actor_rollout_ref.actor.policy_loss.dro_beta is None
    message = _refusal(f"{ARR}.actor.policy_loss.dro_beta=0.1")
    assert f"{ARR}.actor.policy_loss.dro_beta=0.1 is refused" in message and "dro" in message
    assert "loss_mode" in message


# ------------------------------------------------------------------ skip (upstream main's SkipManager)


def test_skip_section_has_upstreams_target_and_defaults():
    from verl.utils.skip import SkipEntryConfig, SkipManagerConfig

    assert load_config([]).skip._target_ == "verl.utils.skip.SkipManagerConfig"
    skip = _typed().skip
    assert isinstance(skip, SkipManagerConfig) and skip == SkipManagerConfig()
    for entry in (skip.rollout, skip.rollout_tq, skip.async_rollout):
        assert entry == SkipEntryConfig()
        assert (entry.enable, entry.dump_dir, entry.steps, entry.action) == (
            False, "~/.verl/rollout_dump", [], "cache")


@pytest.mark.parametrize("override", [
    "skip.rollout.enable=true", "skip.rollout.steps=[1,2]", "skip.rollout_tq.action=repeat",
    "skip.async_rollout.dump_dir=/tmp/dumps",
])
def test_skip_keys_are_refused_pointing_at_the_rollout_skip(override):
    key = override.split("=")[0]
    message = _refusal(override)
    assert f"{key}=" in message and "is refused" in message
    assert f"{ARR}.rollout.skip" in message


# ------------------------------------------------------------------ the profilers' finish hook / relocate_results

HOOK_KEYS = ("relocate_results", "finish_hook_cmd", "finish_hook_all_ranks", "finish_hook_ranks")
ROLES = (f"{ARR}.actor", f"{ARR}.ref", f"{ARR}.rollout", "critic")


def _section(cfg, dotted: str):
    for name in dotted.split("."):
        cfg = getattr(cfg, name)
    return cfg


def test_profiler_hook_keys_default_off_and_every_role_follows_the_global_section():
    typed = _typed()
    for key in ("global_profiler", *(f"{r}.profiler" for r in ROLES)):
        section = _section(typed, key)
        assert [getattr(section, k) for k in HOOK_KEYS] == [False, None, False, []], key
    typed = _typed("global_profiler.finish_hook_cmd=echo hi", "global_profiler.finish_hook_ranks=[0,2]",
                   "global_profiler.finish_hook_all_ranks=true")
    for role in ROLES:
        p = _section(typed, f"{role}.profiler")
        assert (p.finish_hook_cmd, p.finish_hook_ranks, p.finish_hook_all_ranks) == ("echo hi", [0, 2], True), role
    # the rollout follows the actor's section (it runs in the actor's worker)
    assert _typed(f"{ARR}.actor.profiler.finish_hook_cmd=ls").actor_rollout_ref.rollout.profiler.finish_hook_cmd == "ls"


def _dist_profiler(tmp_path, rank: int = 0, role: str = "actor", **hook):
    from verl.utils.profiler import DistProfiler, RoleProfilerConfig

    config = RoleProfilerConfig(tool="torch", enable=True, save_path=str(tmp_path / "profile"), **hook)
    return DistProfiler(rank=rank, config=config, role=role)


def test_the_finish_hook_runs_a_real_command_with_upstreams_environment(tmp_path):
    out = tmp_path / "env.txt"
    cmd = (f'echo "$VERL_PROFILE_SAVE_PATH $VERL_PROFILE_TOOL $VERL_PROFILE_RANK $VERL_PROFILE_ROLE '
           f'$VERL_PROFILE_PID" > {out}')
    assert _dist_profiler(tmp_path, rank=0, role="critic", finish_hook_cmd=cmd).run_finish_hook() == 0
    save, tool, rank, role, pid = out.read_text().split()
    assert (save, tool, rank, role) == (str(tmp_path / "profile"), "torch", "0", "critic") and int(pid) > 0
    # a failing command is reported by its status, not raised
    assert _dist_profiler(tmp_path, finish_hook_cmd="exit 3").run_finish_hook() == 3


def test_the_finish_hook_runs_on_the_selected_ranks_only(tmp_path):
    def ran(rank: int, **hook) -> bool:
        marker = tmp_path / f"done_{rank}"
        marker.unlink(missing_ok=True)
        _dist_profiler(tmp_path, rank=rank, finish_hook_cmd=f"touch {marker}", **hook).run_finish_hook()
        return marker.exists()

    # unset: the profiled ranks (no ranks given: rank 0, as upstream's profiler)
    assert ran(0) and not ran(1)
    assert ran(1, ranks=[1]) and not ran(0, ranks=[1])
    assert ran(1, all_ranks=True)
    # finish_hook_ranks picks, finish_hook_all_ranks overrides it
    assert ran(3, finish_hook_ranks=[3]) and not ran(0, finish_hook_ranks=[3])
    assert ran(5, finish_hook_all_ranks=True, finish_hook_ranks=[3])
    # a role that is not profiled runs nothing
    from verl.utils.profiler import DistProfiler, RoleProfilerConfig

    marker = tmp_path / "never"
    off = DistProfiler(rank=0, config=RoleProfilerConfig(tool="torch", enable=False, finish_hook_cmd=f"touch {marker}"))
    assert off.run_finish_hook() is None and not marker.exists()




def _driver_log(config, total: int) -> list:
    from verl.trainer.ppo.profiling import profile_step

    log: list = []

    class _Trainer:
        pass

    trainer = _Trainer()
    trainer.config, trainer.total_training_steps = config, total
    trainer.actor_rollout_wg, trainer.ref_policy_wg, trainer.critic_wg, trainer.rm_wg = _Group("actor", log), None, None, None
    for step in range(1, total + 1):
        with profile_step(trainer, step):
            log.append(("step", step))
    return log


def test_the_driver_runs_the_hook_once_after_the_last_profiled_step():
    base = ("global_profiler.tool=torch", f"{ARR}.actor.profiler.enable=true")
    config = _typed(*base, "global_profiler.steps=[1,3,9]", "global_profiler.finish_hook_cmd=echo")
    # step 9 is past the run's end: the last profiled step is 3
    assert _driver_log(config, 4) == [
        ("actor", "start", 1), ("step", 1), ("actor", "stop"), ("step", 2),
        ("actor", "start", 3), ("step", 3), ("actor", "stop"), ("actor", "hook"), ("step", 4)]
    config = _typed(*base, "global_profiler.steps=[1,2]", "global_profiler.profile_continuous_steps=true",
                    "global_profiler.finish_hook_cmd=echo")
    assert _driver_log(config, 3)[-3:] == [("actor", "stop"), ("actor", "hook"), ("step", 3)]
    # no hook set: never called
    config = _typed(*base, "global_profiler.steps=[1]")
    assert ("actor", "hook") not in _driver_log(config, 2)


def test_a_worker_runs_its_roles_hook_after_its_trace_is_written(monkeypatch, tmp_path):
    from verl.workers import fsdp_workers

    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    save = tmp_path / "profile"
    listing = tmp_path / "listing.txt"
    config = _typed("global_profiler.tool=torch", "global_profiler.steps=[1]", f"global_profiler.save_path={save}",
                    f"{ARR}.actor.profiler.enable=true",
                    f'global_profiler.finish_hook_cmd=\'cd "$VERL_PROFILE_SAVE_PATH" && find . -name "*.gz" > '
                    f'{listing} && echo "$VERL_PROFILE_ROLE" >> {listing}\'')
    worker = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout")
    worker.start_profile(profile_step=1)
    worker.stop_profile()
    worker.run_profile_finish_hook()
    assert listing.read_text().split() == ["./1/actor_rollout/prof_rank-0.json.gz", "actor_rollout"]


def test_relocate_results_is_accepted_with_a_note():
    typed, notes = _typed_with_notes("global_profiler.relocate_results=true")
    assert typed.actor_rollout_ref.actor.profiler.relocate_results is True
    assert [n for n in notes if n.startswith("global_profiler.relocate_results=true") and "save_path" in n]
    _, notes = _typed_with_notes()
    assert not [n for n in notes if "relocate_results" in n]


@pytest.mark.parametrize("tool", ["torch", "npu"])
def test_rollout_profile_token_window_is_refused(tool):
    key = f"{ARR}.rollout.profiler.tool_config.{tool}.profile_token_start"
    message = _refusal(f"{key}=10")
    assert f"{key}=10 is refused" in message
    assert _typed().actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_end is None


def test_the_role_sections_carry_the_hook_keys_and_the_reward_models_does_not():
    from verl.utils.profiler import ProfilerConfig, RoleProfilerConfig, RolloutProfilerConfig

    typed = _typed()
    for role in (f"{ARR}.actor", f"{ARR}.ref", "critic"):
        assert type(_section(typed, f"{role}.profiler")) is RoleProfilerConfig, role
    assert type(typed.actor_rollout_ref.rollout.profiler) is RolloutProfilerConfig
    # upstream's reward-model profiler has no finish-hook keys; its section stays the plain class
    assert type(typed.reward_model.profiler) is ProfilerConfig
    assert not ProfilerConfig(tool="torch", enable=True).runs_finish_hook(0)
    # the rollout's section equals the actor's it follows (its token window at the default)
    assert typed.actor_rollout_ref.rollout.profiler == typed.actor_rollout_ref.actor.profiler
    rollout_torch = typed.actor_rollout_ref.rollout.profiler.tool_config.torch
    assert rollout_torch == typed.actor_rollout_ref.actor.profiler.tool_config.torch
    assert typed.actor_rollout_ref.actor.profiler.tool_config.torch == rollout_torch
