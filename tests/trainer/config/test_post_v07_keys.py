"""Key groups of upstream verl after v0.7, declared with upstream's names and defaults and refused unless at
them: fsdp_config.qat, model.lora (Megatron-Bridge), the precision_debugger profiler tool, distillation,
transfer_queue.backend and the rollout's standalone-pool keys (nnodes, n_gpus_per_node)."""

from __future__ import annotations

import pytest

from tests.trainer.config.overrides_helpers import refusal_of, typed_from
from verl.trainer.config import ConfigError
from verl.trainer.config.trainer import TrainerConfig
from verl.workers.config import (
    DistillationConfig,
    FSDPEngineConfig,
    HFModelConfig,
    MegatronLoraConfig,
    QATEngineConfig,
    RolloutConfig,
)

ARR = "actor_rollout_ref"
PD = "global_profiler.global_tool_config.precision_debugger"



def test_the_defaults_compose_and_pass_the_check():
    cfg = typed_from()
    arr = cfg.actor_rollout_ref
    for engine in (arr.actor.fsdp_config, arr.ref.fsdp_config, cfg.critic.model.fsdp_config,
                   cfg.reward_model.model.fsdp_config):
        assert engine.qat == QATEngineConfig()
        assert engine.qat.ignore_patterns == ["lm_head", "embed_tokens", "re:.*mlp.gate$"]
    assert arr.model.lora == MegatronLoraConfig() and arr.model.lora.rank == 0
    assert arr.model.lora.target_modules == ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]
    assert cfg.global_profiler.global_tool_config.precision_debugger.strict is False
    for role in (arr.actor, arr.ref, arr.rollout, cfg.critic):
        pd = role.profiler.tool_config.precision_debugger
        assert (pd.config_path, pd.steps, pd.stages, pd.strict) == (None, None, None, False)
    assert isinstance(cfg.distillation, DistillationConfig) and cfg.distillation.enabled is False
    assert cfg.distillation.distillation_loss.loss_mode == "k3"
    assert cfg.transfer_queue.backend.storage_backend == "SimpleStorage"
    assert cfg.transfer_queue.backend.SimpleStorage.total_storage_size == 100000
    assert (arr.rollout.nnodes, arr.rollout.n_gpus_per_node) == (0, cfg.trainer.n_gpus_per_node)


def test_the_classes_have_upstreams_defaults_in_python():
    assert FSDPEngineConfig().qat.mode == "w4a16" and QATEngineConfig().group_size == 16
    assert HFModelConfig().lora.alpha == 32 and MegatronLoraConfig().freeze_language_model is True
    assert (RolloutConfig().nnodes, RolloutConfig().n_gpus_per_node) == (0, TrainerConfig().n_gpus_per_node)
    assert DistillationConfig().teacher_models.teacher_model.inference.tensor_model_parallel_size == 2


def test_the_distillation_teacher_follows_the_rollout():
    cfg = typed_from(f"{ARR}.rollout.temperature=0.7", "data.max_prompt_length=256")
    inference = cfg.distillation.teacher_models.teacher_model.inference
    assert (inference.name, inference.temperature, inference.prompt_length) == ("hf", 0.7, 256)


@pytest.mark.parametrize("section", [f"{ARR}.actor.fsdp_config", f"{ARR}.ref.fsdp_config", "critic.model.fsdp_config",
                                     "reward_model.model.fsdp_config"])
def test_fsdp_config_qat_is_refused(section):
    message = refusal_of(f"{section}.qat.enable=true")
    assert f"{section}.qat.enable=True is refused" in message and "NVFP4" in message
    assert "fsdp_config.qat" in message


def test_model_lora_is_refused_pointing_at_the_fsdp_lora_keys():
    message = refusal_of(f"{ARR}.model.lora.rank=8")
    assert f"{ARR}.model.lora.rank=8 is refused" in message
    assert "Megatron" in message and "lora_rank" in message


def test_precision_debugger_keys_and_tool_are_refused():
    message = refusal_of(f"{PD}.config_path=/tmp/msprobe.json")
    assert f"{PD}.config_path='/tmp/msprobe.json' is refused" in message and "msprobe" in message
    # the roles follow the global section: only the key set is named
    with pytest.raises(ConfigError) as info:
        typed_from(f"{PD}.config_path=/tmp/msprobe.json")
    assert [p for p in info.value.problems if "precision_debugger" in p] == [
        p for p in info.value.problems if p.startswith(f"{PD}.config_path=")]
    message = refusal_of(f"{ARR}.actor.profiler.tool_config.precision_debugger.strict=true")
    assert f"{ARR}.actor.profiler.tool_config.precision_debugger.strict=True is refused" in message
    message = refusal_of("global_profiler.tool=precision_debugger")
    assert "global_profiler.tool='precision_debugger' is refused" in message and "msprobe" in message


def test_distillation_is_refused():
    message = refusal_of("distillation.enabled=true")
    assert "distillation.enabled=True is refused" in message and "teacher" in message
    message = refusal_of("distillation.teacher_models.teacher_model.inference.gpu_memory_utilization=0.8")
    assert "distillation.teacher_models.teacher_model.inference.gpu_memory_utilization=0.8 is refused" in message
    # a teacher key that follows the rollout is refused only when set apart from it
    message = refusal_of("distillation.teacher_models.teacher_model.inference.temperature=0.5")
    assert "distillation.teacher_models.teacher_model.inference.temperature=0.5 is refused" in message


def test_transfer_queue_backend_is_refused():
    message = refusal_of("transfer_queue.backend.SimpleStorage.num_data_storage_units=2")
    assert "transfer_queue.backend.SimpleStorage.num_data_storage_units=2 is refused" in message
    assert "TransferQueue" in message


def test_standalone_rollout_nodes_are_refused():
    message = refusal_of(f"{ARR}.rollout.nnodes=1")
    assert f"{ARR}.rollout.nnodes=1 is refused" in message and "colocated" in message
    message = refusal_of(f"{ARR}.rollout.n_gpus_per_node=4")
    assert f"{ARR}.rollout.n_gpus_per_node=4 is refused" in message and "trainer.n_gpus_per_node" in message


def test_rollout_gpus_follow_the_trainer():
    problems = []
    try:
        typed_from("trainer.n_gpus_per_node=1")
    except ConfigError as e:  # the batch sizes may have their own say; the rollout key must not be among them
        problems = e.problems
    assert not [p for p in problems if "rollout.n_gpus_per_node" in p]
