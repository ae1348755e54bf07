"""rollout.prometheus, rollout.checkpoint_engine and model.mtp / rollout.mtp before Ray (issue 33): what runs, what
is noted, what is refused and why. The runtime effects: tests/workers/rollout/test_prometheus_metrics.py and
test_checkpoint_engine_buckets.py."""

from __future__ import annotations

import warnings

import pytest

from tests.helpers.tiny_model import tiny_llama_config
from tests.trainer.config.overrides_helpers import problems_of, set_keys
from verl.trainer.config import ConfigWarning, load_config, validate_config
from verl.workers.config import MtpConfig, PrometheusConfig, RolloutConfig
from verl.workers.rollout.prometheus import served_model_name
from verl.workers.rollout.vllm.engine import engine_kwargs

R = "actor_rollout_ref.rollout"
M = "actor_rollout_ref.model"


def _validate(cfg):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        typed = validate_config(cfg, check_files=False)
    return typed, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


# ------------------------------------------------------------------ prometheus


def test_prometheus_runs_with_vllm_and_log_stats(cfg):
    set_keys(cfg, actor_rollout_ref__rollout__name="vllm", actor_rollout_ref__rollout__disable_log_stats=False,
             actor_rollout_ref__rollout__prometheus__enable=True,
             actor_rollout_ref__rollout__prometheus__served_model_name="Qwen/Qwen2.5-0.5B")
    typed, notes = _validate(cfg)
    prom = typed.actor_rollout_ref.rollout.prometheus
    assert prom.enable and prom.port == 9090 and prom.file.endswith("prometheus.yml")
    assert not [n for n in notes if "prometheus" in n]


def test_prometheus_refused_without_vllm_or_with_log_stats_off(cfg):
    set_keys(cfg, actor_rollout_ref__rollout__name="hf", actor_rollout_ref__rollout__disable_log_stats=False,
             actor_rollout_ref__rollout__prometheus__enable=True)
    (problem,) = [p for p in problems_of(cfg) if "prometheus" in p]
    assert problem.startswith(f"{R}.prometheus.enable=true needs {R}.name=vllm")
    set_keys(cfg, actor_rollout_ref__rollout__name="vllm", actor_rollout_ref__rollout__disable_log_stats=True)
    (problem,) = [p for p in problems_of(cfg) if "prometheus" in p]
    assert f"{R}.disable_log_stats=false" in problem  # upstream raises the same ValueError


def test_prometheus_keys_without_enable_are_noted(cfg):
    set_keys(cfg, actor_rollout_ref__rollout__prometheus__port=9091)
    _, notes = _validate(cfg)
    (note,) = [n for n in notes if "prometheus" in n]
    assert note.startswith(f"{R}.prometheus.port: {R}.prometheus.enable=false")


def test_served_model_name_reaches_the_engine_as_its_last_path_part():
    hf = tiny_llama_config()
    on = RolloutConfig(name="vllm", disable_log_stats=False, dtype="float32",
                       prometheus=PrometheusConfig(enable=True, served_model_name="org/tiny-policy"))
    assert engine_kwargs(on, "/m", hf, seed=0, engines_per_node=1)["served_model_name"] == "tiny-policy"
    assert engine_kwargs(on, "/m", hf, seed=0, engines_per_node=1)["disable_log_stats"] is False
    off = RolloutConfig(name="vllm", dtype="float32", prometheus=PrometheusConfig(served_model_name="org/x"))
    assert "served_model_name" not in engine_kwargs(off, "/m", hf, seed=0, engines_per_node=1)
    assert served_model_name(PrometheusConfig(enable=True)) is None  # vLLM's default: the model path


# ------------------------------------------------------------------ checkpoint_engine


@pytest.mark.parametrize(("backend", "hardware"), [("nccl", "NVIDIA GPUs"), ("nixl", "RDMA"), ("hccl", "Ascend"),
                                                   ("mooncake", "RDMA"), ("kimi_ckpt_engine", "NVIDIA GPUs")])
def test_checkpoint_engine_backends_needing_other_hardware_are_refused(cfg, backend, hardware):
    set_keys(cfg, actor_rollout_ref__rollout__checkpoint_engine__backend=backend)
    (problem,) = [p for p in problems_of(cfg) if "checkpoint_engine" in p]
    assert problem.startswith(f"{R}.checkpoint_engine.backend='{backend}' is refused")
    assert hardware in problem and "backend=naive" in problem


def test_checkpoint_engine_options_are_checked(cfg):
    set_keys(cfg, actor_rollout_ref__rollout__checkpoint_engine__custom_backend_module="my_pkg.engines")
    assert any(p.startswith(f"{R}.checkpoint_engine.custom_backend_module") for p in problems_of(cfg))
    set_keys(cfg, actor_rollout_ref__rollout__checkpoint_engine__custom_backend_module=None,
             actor_rollout_ref__rollout__checkpoint_engine__engine_kwargs={"naive": {"device": "cuda"}})
    (problem,) = [p for p in problems_of(cfg) if "checkpoint_engine" in p]
    assert "takes no options" in problem
    set_keys(cfg, actor_rollout_ref__rollout__checkpoint_engine__engine_kwargs={"rdma": {}})
    assert any("not a checkpoint-engine backend" in p for p in problems_of(cfg))
    set_keys(cfg, actor_rollout_ref__rollout__checkpoint_engine__engine_kwargs={"nccl": {"rebuild_group": True}},
             actor_rollout_ref__rollout__checkpoint_engine__update_weights_bucket_megabytes=64)
    typed, notes = _validate(cfg)  # hf rollout (the default): the bucket sizes nothing, and nccl's options are unused
    assert typed.actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes == 64
    assert any(n.startswith(f"{R}.checkpoint_engine.engine_kwargs.nccl") for n in notes)
    assert any(n.startswith(f"{R}.checkpoint_engine.update_weights_bucket_megabytes=64") for n in notes)
    set_keys(cfg, actor_rollout_ref__rollout__name="vllm", actor_rollout_ref__rollout__checkpoint_engine__engine_kwargs={})
    _, notes = _validate(cfg)
    assert not [n for n in notes if "checkpoint_engine" in n]  # vllm: the bucket is honoured, no note


# ------------------------------------------------------------------ mtp


def test_mtp_defaults_run_and_rollout_mtp_follows_the_model_section():
    cfg = load_config([f"{M}.mtp.enable=false", f"{M}.mtp.enable_train=false", f"{M}.mtp.enable_rollout=false",
                       f"{M}.mtp.method=mtp", f"{M}.mtp.num_speculative_tokens=1"])
    typed, _ = _validate(cfg)
    assert typed.actor_rollout_ref.model.mtp == MtpConfig() == typed.actor_rollout_ref.rollout.mtp
    assert cfg.actor_rollout_ref.rollout.mtp == cfg.actor_rollout_ref.model.mtp  # upstream's oc.select interpolation


def test_mtp_enable_is_refused_naming_why():
    cfg = load_config([f"{M}.mtp.enable=true", f"{M}.mtp.enable_rollout=true", f"{M}.mtp.num_speculative_tokens=2"])
    problems = problems_of(cfg)
    model = [p for p in problems if f"{M}.mtp" in p]
    assert model and f"{M}.mtp.enable=True" in model[0] and f"{M}.mtp.num_speculative_tokens=2" in model[0]
    assert "Megatron" in model[0] and "transformers" in model[0]
    assert any(f"{R}.mtp.enable=True" in p for p in problems)  # the rollout's copy says the same
