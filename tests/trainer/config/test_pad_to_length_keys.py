"""pad_to_length / pad_to_length_bucket (upstream after v0.7) on the command line: the actor's role key and its
fsdp_config copy are one setting, the reference follows the actor, the critic's sits in its engine (critic.fsdp or
critic.model.fsdp_config), and a role that does not pack its rows is refused before Ray."""

from __future__ import annotations

from tests.trainer.config.overrides_helpers import refusal_of, typed_from

ARR = "actor_rollout_ref"


def test_defaults_are_upstreams():
    typed = typed_from()
    for role in (typed.actor_rollout_ref.actor, typed.actor_rollout_ref.ref):
        assert role.pad_to_length is False and role.fsdp_config.pad_to_length is False
        assert role.fsdp_config.pad_to_length_bucket == 1024
    assert typed.critic.model.fsdp_config.pad_to_length is False
    assert typed.critic.model.fsdp_config.pad_to_length_bucket == 1024


def test_the_actor_key_reaches_its_engine_and_the_reference():
    typed = typed_from(f"{ARR}.actor.pad_to_length=true", f"{ARR}.actor.fsdp_config.pad_to_length_bucket=256")
    actor, ref = typed.actor_rollout_ref.actor, typed.actor_rollout_ref.ref
    assert actor.pad_to_length and actor.fsdp_config.pad_to_length and actor.fsdp_config.pad_to_length_bucket == 256
    assert ref.pad_to_length and ref.fsdp_config.pad_to_length and ref.fsdp_config.pad_to_length_bucket == 256


def test_the_engine_copy_alone_applies_to_the_role_and_the_reference():
    typed = typed_from(f"{ARR}.actor.fsdp_config.pad_to_length=true")
    assert typed.actor_rollout_ref.actor.pad_to_length is True
    assert typed.actor_rollout_ref.ref.pad_to_length is True and typed.actor_rollout_ref.ref.fsdp_config.pad_to_length
    # the reference alone
    typed = typed_from(f"{ARR}.ref.fsdp_config.pad_to_length=true", f"{ARR}.ref.fsdp_config.pad_to_length_bucket=64")
    assert typed.actor_rollout_ref.actor.pad_to_length is False
    assert typed.actor_rollout_ref.ref.pad_to_length is True and typed.actor_rollout_ref.ref.fsdp_config.pad_to_length_bucket == 64


def test_the_critics_later_upstream_section_reaches_its_engine():
    typed = typed_from("algorithm.adv_estimator=gae", "critic.fsdp.pad_to_length=true", "critic.fsdp.pad_to_length_bucket=32")
    engine = typed.critic.model.fsdp_config
    assert engine.pad_to_length is True and engine.pad_to_length_bucket == 32


def test_unpacked_rows_and_router_replay_are_refused():
    message = refusal_of(f"{ARR}.actor.pad_to_length=true", f"{ARR}.model.use_remove_padding=false")
    assert f"{ARR}.actor.pad_to_length=true pads the packed row of use_remove_padding" in message
    assert f"set {ARR}.model.use_remove_padding=true" in message
    message = refusal_of("algorithm.adv_estimator=gae", "critic.model.fsdp_config.pad_to_length=true",
                         "critic.model.use_remove_padding=false")
    assert "critic.model.fsdp_config.pad_to_length=true pads the packed row" in message
    message = refusal_of(f"{ARR}.actor.pad_to_length=true", f"{ARR}.actor.router_replay.mode=R2")
    assert f"{ARR}.actor.pad_to_length=true does not combine with {ARR}.actor.router_replay.mode=R2" in message
