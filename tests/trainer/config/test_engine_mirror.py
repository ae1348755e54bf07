"""Upstream's fsdp_config copies of role keys (issue 33): ulysses_sequence_parallel_size,
entropy_from_logits_with_chunking, use_torch_compile, entropy_checkpointing, forward_only. Each is one setting with
the role key the workers read: the one set applies, two different values are refused naming both."""

from __future__ import annotations

import warnings

import pytest

from tests.trainer.config.overrides_helpers import problems_of, set_keys
from verl.trainer.config import ConfigWarning, validate_config

ARR = "actor_rollout_ref"
ROLE_KEYS = ("ulysses_sequence_parallel_size", "entropy_from_logits_with_chunking", "entropy_checkpointing")


def _validate(cfg):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        typed = validate_config(cfg, check_files=False)
    return typed, [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def test_defaults_are_upstreams_and_agree_with_the_role_keys(cfg):
    typed, _ = _validate(cfg)
    for role in (typed.actor_rollout_ref.actor, typed.actor_rollout_ref.ref):
        engine = role.fsdp_config
        assert engine.ulysses_sequence_parallel_size == 1 == role.ulysses_sequence_parallel_size
        assert engine.entropy_from_logits_with_chunking is False and engine.entropy_checkpointing is False
        # use_torch_compile follows the role key in the yaml (ours: false, see actor.use_torch_compile)
        assert engine.use_torch_compile is role.use_torch_compile is False
    assert typed.actor_rollout_ref.actor.fsdp_config.forward_only is False
    assert typed.actor_rollout_ref.ref.fsdp_config.forward_only is False  # upstream's default; forward only anyway
    assert typed.critic.model.fsdp_config.use_torch_compile is True  # upstream's default


def test_the_actor_fsdp_config_keys_reach_the_role_keys_the_workers_read(cfg):
    set_keys(cfg, actor_rollout_ref__model__use_remove_padding=True,
             actor_rollout_ref__actor__fsdp_config__ulysses_sequence_parallel_size=2,
             actor_rollout_ref__actor__fsdp_config__entropy_from_logits_with_chunking=True,
             actor_rollout_ref__actor__fsdp_config__entropy_checkpointing=True,
             actor_rollout_ref__actor__fsdp_config__entropy_from_logits_chunk_size=512,
             actor_rollout_ref__actor__fsdp_config__use_torch_compile=True)
    typed, _ = _validate(cfg)
    actor = typed.actor_rollout_ref.actor
    assert actor.ulysses_sequence_parallel_size == 2 and actor.entropy_from_logits_chunk_size == 512
    assert actor.entropy_from_logits_with_chunking is True and actor.entropy_checkpointing is True
    assert actor.use_torch_compile is True
    # written back into the composed config too, so the workers built from it read the same values
    assert cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size == 2
    assert cfg.actor_rollout_ref.actor.entropy_checkpointing is True
    # the reference follows the actor's ulysses size (its yaml) and its engine key follows it in turn
    assert typed.actor_rollout_ref.ref.ulysses_sequence_parallel_size == 2
    assert typed.actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size == 2


def test_role_keys_reach_the_engine_keys(cfg):
    set_keys(cfg, actor_rollout_ref__actor__entropy_checkpointing=True, actor_rollout_ref__actor__use_torch_compile=True,
             algorithm__adv_estimator="gae", critic__model__use_remove_padding=True,
             critic__ulysses_sequence_parallel_size=2)
    typed, _ = _validate(cfg)
    assert typed.actor_rollout_ref.actor.fsdp_config.entropy_checkpointing is True
    assert typed.actor_rollout_ref.actor.fsdp_config.use_torch_compile is True
    assert typed.actor_rollout_ref.ref.fsdp_config.use_torch_compile is True  # ref.use_torch_compile follows the actor
    assert typed.use_critic
    assert typed.critic.model.fsdp_config.ulysses_sequence_parallel_size == 2


def test_ref_and_critic_engine_keys_apply(cfg):
    set_keys(cfg, actor_rollout_ref__ref__fsdp_config__entropy_from_logits_with_chunking=True,
             actor_rollout_ref__ref__fsdp_config__entropy_from_logits_chunk_size=64,
             actor_rollout_ref__ref__fsdp_config__entropy_checkpointing=True,
             actor_rollout_ref__ref__fsdp_config__use_torch_compile=True,
             algorithm__adv_estimator="gae", critic__model__use_remove_padding=True,
             critic__model__fsdp_config__ulysses_sequence_parallel_size=2)
    typed, _ = _validate(cfg)
    ref = typed.actor_rollout_ref.ref
    assert ref.entropy_from_logits_with_chunking is True and ref.entropy_checkpointing is True
    assert ref.entropy_from_logits_chunk_size == 64
    assert ref.use_torch_compile is True and typed.actor_rollout_ref.actor.use_torch_compile is False
    assert typed.critic.ulysses_sequence_parallel_size == 2
    # the reference's size can differ from the actor's only through its own keys; its engine key reaches it too
    set_keys(cfg, actor_rollout_ref__model__use_remove_padding=True,
             actor_rollout_ref__ref__fsdp_config__ulysses_sequence_parallel_size=2)
    typed, _ = _validate(cfg)
    assert typed.actor_rollout_ref.ref.ulysses_sequence_parallel_size == 2


@pytest.mark.parametrize("name,role_value,engine_value", [
    ("entropy_checkpointing", True, False), ("use_torch_compile", True, False)])
def test_two_different_values_are_refused_naming_both(cfg, name, role_value, engine_value):
    set_keys(cfg, **{f"actor_rollout_ref__actor__{name}": role_value,
                     f"actor_rollout_ref__actor__fsdp_config__{name}": engine_value})
    if name == "entropy_checkpointing":  # the engine key at its default: the role key applies, no refusal
        typed, _ = _validate(cfg)
        assert typed.actor_rollout_ref.actor.fsdp_config.entropy_checkpointing is True
        return
    assert any(p.startswith(f"{ARR}.actor.fsdp_config.{name}={engine_value} and {ARR}.actor.{name}={role_value} are "
                            "the same setting") for p in problems_of(cfg))


def test_two_different_ulysses_sizes_are_refused(cfg):
    set_keys(cfg, actor_rollout_ref__model__use_remove_padding=True,
             actor_rollout_ref__actor__ulysses_sequence_parallel_size=2,
             actor_rollout_ref__actor__fsdp_config__ulysses_sequence_parallel_size=4)
    assert any(p.startswith(f"{ARR}.actor.fsdp_config.ulysses_sequence_parallel_size=4 and "
                            f"{ARR}.actor.ulysses_sequence_parallel_size=2") for p in problems_of(cfg))


def test_the_reference_is_forward_only_either_way(cfg):
    # upstream's workers set the reference engine's forward_only themselves; both spellings are accepted as-is
    set_keys(cfg, actor_rollout_ref__ref__fsdp_config__forward_only=True,
             reward_model__enable=True, reward_model__model__path="/models/rm",
             reward_model__model__fsdp_config__forward_only=True)
    typed, _ = _validate(cfg)
    assert typed.actor_rollout_ref.ref.fsdp_config.forward_only is True
    assert typed.reward_model.model.fsdp_config.forward_only is True


def test_forward_only_contradicting_the_role_is_refused(cfg):
    set_keys(cfg, actor_rollout_ref__actor__fsdp_config__forward_only=True)
    assert any(p.startswith(f"{ARR}.actor.fsdp_config.forward_only=true: the actor trains") for p in problems_of(cfg))
    set_keys(cfg, actor_rollout_ref__actor__fsdp_config__forward_only=False, algorithm__adv_estimator="gae",
             critic__model__fsdp_config__forward_only=True)
    assert any(p.startswith("critic.model.fsdp_config.forward_only=true: the critic trains") for p in problems_of(cfg))


def test_critic_entropy_keys_are_refused_and_compile_noted(cfg):
    set_keys(cfg, algorithm__adv_estimator="gae", critic__model__fsdp_config__entropy_checkpointing=True)
    assert any(p.startswith("critic.model.fsdp_config.entropy_checkpointing=true: the critic computes values")
               for p in problems_of(cfg))
    set_keys(cfg, critic__model__fsdp_config__entropy_checkpointing=False,
             critic__model__fsdp_config__entropy_from_logits_chunk_size=16)
    assert any(p.startswith("critic.model.fsdp_config.entropy_from_logits_chunk_size=16: the critic computes values")
               for p in problems_of(cfg))
    set_keys(cfg, critic__model__fsdp_config__entropy_from_logits_chunk_size=2048)
    set_keys(cfg, critic__model__fsdp_config__entropy_checkpointing=False,
             critic__model__fsdp_config__use_torch_compile=False)
    _, notes = _validate(cfg)
    assert any(n.startswith("critic.model.fsdp_config.use_torch_compile=False: the critic has no compiled") for n in notes)


def test_reward_model_engine_keys(cfg):
    key = "reward_model.model.fsdp_config"
    set_keys(cfg, reward_model__enable=True, reward_model__model__path="/models/rm",
             reward_model__model__fsdp_config__entropy_checkpointing=True,
             reward_model__model__fsdp_config__entropy_from_logits_with_chunking=True,
             reward_model__model__fsdp_config__entropy_from_logits_chunk_size=16,
             reward_model__model__fsdp_config__ulysses_sequence_parallel_size=2)
    problems = problems_of(cfg)
    assert any(p.startswith(f"{key}.entropy_from_logits_chunk_size=16") for p in problems)
    assert any(p.startswith(f"{key}.entropy_checkpointing=true") for p in problems)
    assert any(p.startswith(f"{key}.entropy_from_logits_with_chunking=true") for p in problems)
    assert any(p.startswith(f"{key}.ulysses_sequence_parallel_size=2") for p in problems)
    set_keys(cfg, reward_model__model__fsdp_config__entropy_checkpointing=False,
             reward_model__model__fsdp_config__entropy_from_logits_with_chunking=False,
             reward_model__model__fsdp_config__entropy_from_logits_chunk_size=2048,
             reward_model__model__fsdp_config__ulysses_sequence_parallel_size=1,
             reward_model__model__fsdp_config__use_torch_compile=False)
    typed, notes = _validate(cfg)
    assert any(n.startswith(f"{key}.use_torch_compile=False: the reward model has no compiled") for n in notes)
