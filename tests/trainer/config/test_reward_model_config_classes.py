"""The reward model's config classes at upstream's path (verl.workers.config): RewardModelConfig with its engine
variants, their fields and defaults as our yaml loads them, their own checks at construction (ValueError, as
upstream), which fields are frozen, and McoreRewardModelConfig loading but refused before Ray starts."""

from __future__ import annotations

import dataclasses

import pytest
from hydra import compose, initialize_config_dir

import verl.trainer.config.reward as trainer_reward
from tests.trainer.config.overrides_helpers import problems_of
from verl.trainer.config import PPOTrainerConfig, load_config, validate_config
from verl.trainer.config.yaml_files import CONFIG_DIR
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.profiler import ProfilerConfig
from verl.workers.config import FSDPRewardModelConfig, McoreRewardModelConfig, RewardModelConfig


def _group(name: str, *overrides: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR / "reward_model"), version_base=None):
        return compose(config_name=name, overrides=list(overrides))


def test_one_class_each_also_at_the_trainers_module():
    assert trainer_reward.RewardModelConfig is RewardModelConfig
    assert trainer_reward.FSDPRewardModelConfig is FSDPRewardModelConfig
    assert trainer_reward.McoreRewardModelConfig is McoreRewardModelConfig
    assert isinstance(PPOTrainerConfig().reward_model, FSDPRewardModelConfig)


def test_dp_reward_model_composes_alone_and_loads_our_defaults():
    rm = omega_conf_to_dataclass(_group("dp_reward_model"))
    assert type(rm) is FSDPRewardModelConfig
    assert rm.strategy == "fsdp" and rm.enable is False and rm.reward_manager == "naive"
    assert (rm.micro_batch_size, rm.micro_batch_size_per_gpu) == (None, 2)
    # keys that follow other sections fall back to those sections' defaults when composed alone
    assert rm.use_dynamic_bsz is False and rm.forward_max_token_len_per_gpu == 32768
    assert rm.model.input_tokenizer is None and rm.model.use_fused_kernels is False
    # composed alone the profiler's keys that follow global_profiler and the actor's find nothing: null
    assert rm.ulysses_sequence_parallel_size == 1 and rm.profiler == ProfilerConfig(save_path=None, tool_config=None)
    assert rm.sandbox_fusion.max_concurrent == 64 and rm.launch_reward_fn_async is False


def test_the_global_size_alone_leaves_the_per_gpu_key_null():
    rm = omega_conf_to_dataclass(_group("dp_reward_model", "micro_batch_size=8"))
    assert (rm.micro_batch_size, rm.micro_batch_size_per_gpu) == (8, None)
    typed = validate_config(load_config(["reward_model.micro_batch_size=8"]), check_files=False)
    assert (typed.reward_model.micro_batch_size, typed.reward_model.micro_batch_size_per_gpu) == (8, None)


def test_megatron_reward_model_composes_and_loads_with_upstreams_fields():
    rm = omega_conf_to_dataclass(_group("megatron_reward_model"))
    assert type(rm) is McoreRewardModelConfig
    assert rm.strategy == "megatron" and rm.nccl_timeout == 600 and rm.load_weight is True and rm.megatron == {}
    assert not hasattr(rm, "ulysses_sequence_parallel_size")  # an FSDP key, as upstream


def test_trainer_refuses_the_megatron_reward_model_before_ray():
    first = problems_of(load_config(["reward_model=megatron_reward_model"]))[0]
    assert first.startswith("reward_model._target_='verl.workers.config.McoreRewardModelConfig' is refused: the "
                            "Megatron-LM backend")
    (strategy,) = [p for p in problems_of(load_config(["reward_model.strategy=megatron"]))
                   if p.startswith("reward_model.strategy")]
    assert "is refused: the Megatron-LM backend" in strategy


def test_micro_batch_sizes_checked_at_construction():
    with pytest.raises(ValueError, match="You have set both micro_batch_size=4 .* AND micro_batch_size_per_gpu=2"):
        RewardModelConfig(micro_batch_size=4, micro_batch_size_per_gpu=2)
    with pytest.raises(ValueError, match="Please set at least one of reward_model.micro_batch_size"):
        FSDPRewardModelConfig(micro_batch_size=None, micro_batch_size_per_gpu=None)
    assert RewardModelConfig(micro_batch_size_per_gpu=None, use_dynamic_bsz=True).use_dynamic_bsz is True
    assert RewardModelConfig(micro_batch_size=4, micro_batch_size_per_gpu=None).micro_batch_size == 4
    # in the trainer the same rule is reported under the section's key
    (problem,) = [p for p in problems_of(load_config(["reward_model.micro_batch_size_per_gpu=null"]))
                  if "Please set at least one" in p]
    assert problem.startswith("reward_model: Please set at least one of")


def test_ulysses_needs_remove_padding_and_stays_refused_in_the_trainer():
    with pytest.raises(ValueError, match="you must enable `use_remove_padding`"):
        FSDPRewardModelConfig(ulysses_sequence_parallel_size=2)
    assert FSDPRewardModelConfig(ulysses_sequence_parallel_size=2,
                                 model={"use_remove_padding": True}).ulysses_sequence_parallel_size == 2
    (problem,) = problems_of(load_config(["reward_model.ulysses_sequence_parallel_size=2",
                                          "reward_model.model.use_remove_padding=true"]))
    assert problem.startswith("reward_model.ulysses_sequence_parallel_size=2 is refused: Ulysses")


def test_frozen_but_for_the_micro_batch_sizes():
    rm = FSDPRewardModelConfig()
    for name in ("strategy", "reward_manager", "launch_reward_fn_async", "ulysses_sequence_parallel_size", "rollout"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(rm, name, getattr(rm, name))
    rm.micro_batch_size, rm.micro_batch_size_per_gpu = 8, None
    assert (rm.micro_batch_size, rm.micro_batch_size_per_gpu) == (8, None)
    mcore = McoreRewardModelConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        mcore.nccl_timeout = 1


def test_validate_checks_the_global_size_against_the_ranks():
    FSDPRewardModelConfig(micro_batch_size=4, micro_batch_size_per_gpu=None).validate(n_gpus=4)
    with pytest.raises(ValueError, match=r"micro_batch_size \(2\) \* ulysses_sequence_parallel_size \(1\) must be >= "
                                         r"n_gpus \(4\)"):
        FSDPRewardModelConfig(micro_batch_size=2, micro_batch_size_per_gpu=None).validate(n_gpus=4)


def test_profiler_is_upstreams_and_needs_the_reward_model_worker():
    assert RewardModelConfig(profiler=ProfilerConfig(ranks=[0])).profiler.ranks == [0]  # built in Python, as upstream
    problems = problems_of(load_config(["reward_model.profiler.enable=true", "global_profiler.tool=torch",
                                        "global_profiler.steps=[1]"]))
    assert any(p.startswith("reward_model.profiler.enable=true, but this run has no such worker") for p in problems)
