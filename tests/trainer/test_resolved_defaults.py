"""The machine-dependent defaults: unset precision keys become the hardware's dtype on the driver, once, with a
log line saying what and why; an explicit value always wins; the workers resolve a leftover null the same way."""

from __future__ import annotations

import pytest

from verl.trainer.config import load_config, validate_config
from verl.trainer.resolved_defaults import (
    LOG_PREFIX,
    log_defaults,
    resolve_generation_defaults,
    resolve_ppo_defaults,
    resolve_sft_defaults,
)
from verl.utils import device

AVX512_BF16 = {"avx2", "avx512f", "avx512_bf16"}
AMX = {"avx2", "avx512f", "amx_bf16", "amx_tile"}
AVX2 = {"avx", "avx2", "fma"}


@pytest.fixture
def cpu_with(monkeypatch):
    """Pretend to be a CPU-only machine with the given flags."""

    def use(flags: set[str]) -> None:
        monkeypatch.setattr(device, "is_cuda_available", lambda: False)
        monkeypatch.setattr(device, "_cpu_flags", lambda: flags)
        device.has_fast_bf16.cache_clear()

    yield use
    device.has_fast_bf16.cache_clear()


def _config(*overrides: str):
    return validate_config(load_config(list(overrides)), check_files=False)


def test_the_yaml_leaves_precision_unset_and_turns_on_upstreams_speed_defaults():
    cfg = _config()
    arr = cfg.actor_rollout_ref
    for fsdp in (arr.actor.fsdp_config, arr.ref.fsdp_config, cfg.critic.model.fsdp_config,
                 cfg.reward_model.model.fsdp_config):
        assert fsdp.mixed_precision.param_dtype is None and fsdp.mixed_precision.reduce_dtype == "fp32"
        assert fsdp.model_dtype == "fp32"  # fp32 master weights
    assert arr.rollout.dtype is None
    assert arr.model.use_remove_padding and arr.actor.use_remove_padding and arr.ref.use_remove_padding
    assert arr.model.enable_gradient_checkpointing
    assert cfg.critic.model.use_remove_padding and cfg.critic.model.enable_gradient_checkpointing


@pytest.mark.parametrize("flags, dtype, why", [
    (AVX512_BF16, "bf16", "CPU has avx512_bf16: native bf16 matmuls"),
    (AMX, "bf16", "CPU has amx_bf16: native bf16 matmuls"),
    (AVX2, "fp32", "CPU has no AVX512-BF16/AMX: bf16 matmuls would be emulated"),
])
def test_unset_dtypes_follow_the_hardware_and_say_why(cpu_with, flags, dtype, why):
    cpu_with(flags)
    cfg = _config("algorithm.adv_estimator=gae", "actor_rollout_ref.actor.use_kl_loss=true",
                  "actor_rollout_ref.rollout.name=vllm")
    lines = resolve_ppo_defaults(cfg)
    arr = cfg.actor_rollout_ref
    for fsdp in (arr.actor.fsdp_config, arr.ref.fsdp_config, cfg.critic.model.fsdp_config):
        assert fsdp.mixed_precision.param_dtype == dtype
    assert arr.rollout.dtype == {"bf16": "bfloat16", "fp32": "float32"}[dtype]
    actor_line = next(line for line in lines if line.startswith("actor_rollout_ref.actor.fsdp_config"))
    assert actor_line.startswith(f"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype unset -> {dtype} "
                                 f"({why}")
    assert "master weights kept in fp32" in actor_line and "reduced in fp32" in actor_line
    assert "set it to override" in actor_line
    assert any(line.startswith(f"actor_rollout_ref.rollout.dtype unset -> {arr.rollout.dtype} ({why}")
               for line in lines)
    # only the roles this run builds: the critic (gae) and the ref (kl loss) are in, the reward model is not
    heads = [line.split(" ")[0] for line in lines]
    assert "critic.model.fsdp_config.mixed_precision.param_dtype" in heads
    assert "actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype" in heads
    assert not any(k.startswith("reward_model") for k in heads)
    assert "actor_rollout_ref.model.use_remove_padding=true" in heads
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=true" in heads
    assert "critic.model.enable_gradient_checkpointing=true" in heads
    # checkpointing on a CPU: auto -> selective, filled in and said
    assert arr.model.gradient_checkpointing_policy == cfg.critic.model.gradient_checkpointing_policy == "selective"
    assert any("actor_rollout_ref.model.gradient_checkpointing_policy auto -> selective (CPU" in line for line in lines)
    assert len(heads) == len(set(heads))  # each default once


def test_explicit_values_win_on_any_hardware(cpu_with):
    cpu_with(AVX512_BF16)
    cfg = _config("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
                  "actor_rollout_ref.rollout.dtype=float32", "actor_rollout_ref.rollout.name=vllm",
                  "actor_rollout_ref.model.use_remove_padding=false",
                  "actor_rollout_ref.model.enable_gradient_checkpointing=false")
    lines = resolve_ppo_defaults(cfg)
    arr = cfg.actor_rollout_ref
    assert arr.actor.fsdp_config.mixed_precision.param_dtype == "fp32" and arr.rollout.dtype == "float32"
    assert not arr.actor.use_remove_padding and not arr.ref.use_remove_padding  # the interpolation follows
    assert any(line.startswith("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32 (set)")
               for line in lines)
    assert "actor_rollout_ref.rollout.dtype=float32 (set)" in lines
    assert any(line.startswith("actor_rollout_ref.model.use_remove_padding=false") for line in lines)
    assert any(line.startswith("actor_rollout_ref.model.enable_gradient_checkpointing=false") for line in lines)
    cfg = _config("critic.model.gradient_checkpointing_policy=full", "algorithm.adv_estimator=gae")
    assert any("critic.model.gradient_checkpointing_policy=full (set)" in line for line in resolve_ppo_defaults(cfg))
    assert cfg.critic.model.gradient_checkpointing_policy == "full"
    cpu_with(AVX2)  # bf16 asked for on a CPU that emulates it: still bf16 (the workers warn)
    cfg = _config("actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16")
    resolve_ppo_defaults(cfg)
    assert cfg.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype == "bf16"


def test_a_worker_resolves_a_leftover_null_the_same_way(cpu_with, monkeypatch):
    from verl.trainer.config import FSDPEngineConfig
    from verl.workers import fsdp_utils

    for flags, want in ((AVX512_BF16, "torch.bfloat16"), (AVX2, "torch.float32")):
        cpu_with(flags)
        monkeypatch.setattr(fsdp_utils, "has_fast_bf16", device.has_fast_bf16)
        policy = fsdp_utils.mixed_precision_policy(FSDPEngineConfig())
        assert str(policy.param_dtype) == want and str(policy.reduce_dtype) == "torch.float32"


def test_vllm_engine_dtype_unset_follows_the_hardware(cpu_with, monkeypatch):
    vllm_engine = pytest.importorskip("verl.workers.rollout.vllm.engine")
    from tests.workers.rollout.test_vllm_parts import SMOL, cfg

    monkeypatch.setattr(vllm_engine, "_total_memory_bytes", lambda: 16 * 2**30)
    monkeypatch.setattr(vllm_engine, "get_device_name", lambda: "cpu")
    for flags, want in ((AVX512_BF16, "bfloat16"), (AVX2, "float32")):
        cpu_with(flags)
        monkeypatch.setattr(vllm_engine, "has_fast_bf16", device.has_fast_bf16)
        assert vllm_engine.engine_kwargs(cfg(dtype=None), "/m", SMOL, 0, 1)["dtype"] == want


def test_sft_and_generation_resolve_the_same_way(cpu_with, tmp_path):
    from verl.trainer.main_generation import validate_generation_config
    from verl.trainer.sft.config import validate_sft_config

    cpu_with(AVX512_BF16)
    sft = validate_sft_config(load_config([], config_name="sft_trainer"), check_files=False)
    lines = resolve_sft_defaults(sft)
    assert sft.model.fsdp_config.mixed_precision.param_dtype == "bf16" and sft.use_remove_padding
    assert lines[0].startswith("model.fsdp_config.mixed_precision.param_dtype unset -> bf16 (CPU has avx512_bf16")
    cpu_with(AVX2)
    prompts = tmp_path / "prompts.parquet"
    prompts.touch()  # only its existence is checked here
    gen = validate_generation_config({"rollout": {"name": "vllm"}, "data": {"path": str(prompts)}})
    assert resolve_generation_defaults(gen) == [
        "rollout.dtype unset -> float32 (CPU has no AVX512-BF16/AMX: bf16 matmuls would be emulated, ~100x slower "
        "than fp32); set it to override"]
    gen = validate_generation_config({"data": {"path": str(prompts)}})
    line, = resolve_generation_defaults(gen)
    assert gen.actor.fsdp_config.mixed_precision.param_dtype == "fp32" and "gradients" not in line


def test_log_defaults_prints_each_line_once_with_the_prefix(capsys):
    log_defaults(["a=1 (set)", "b unset -> 2 (why)"])
    assert capsys.readouterr().err == f"{LOG_PREFIX} a=1 (set)\n{LOG_PREFIX} b unset -> 2 (why)\n"
