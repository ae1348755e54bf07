"""Upstream v0.7's small keys at the config level: actor_rollout_ref.ref.rollout_n and ref._target_ (its ref section
is an actor config), and the refusals before Ray of transfer_queue.enable and checkpoint.mbridge_config."""

from __future__ import annotations

import pytest

from tests.trainer.config.overrides_helpers import refusal_of, typed_from
from verl.trainer.config import load_config
from verl.workers.config import RefConfig

ARR = "actor_rollout_ref"



def test_ref_rollout_n_follows_rollout_n_and_must_equal_it():
    cfg = typed_from(f"{ARR}.rollout.n=4", "data.train_batch_size=8", f"{ARR}.actor.ppo_mini_batch_size=4")
    assert cfg.actor_rollout_ref.ref.rollout_n == 4 == cfg.actor_rollout_ref.actor.rollout_n
    message = refusal_of(f"{ARR}.rollout.n=4", f"{ARR}.ref.rollout_n=2", "data.train_batch_size=8",
                       f"{ARR}.actor.ppo_mini_batch_size=4")
    assert (f"{ARR}.ref.rollout_n (2) differs from {ARR}.rollout.n (4); leave {ARR}.ref.rollout_n at its default"
            in message)


def test_ref_target_is_upstreams_actor_class_and_builds_the_reference_config():
    cfg = load_config([])
    assert cfg.actor_rollout_ref.ref._target_ == "verl.workers.config.FSDPActorConfig"
    assert isinstance(typed_from().actor_rollout_ref.ref, RefConfig)
    message = refusal_of(f"{ARR}.ref._target_=verl.workers.config.CriticConfig")
    assert f"{ARR}.ref._target_='verl.workers.config.CriticConfig' is not that class" in message


def test_transfer_queue_enable_is_refused_before_ray():
    assert typed_from().transfer_queue.enable is False
    message = refusal_of("transfer_queue.enable=true")
    assert "transfer_queue.enable=True is refused" in message and "TransferQueue" in message


@pytest.mark.parametrize("section", [f"{ARR}.actor.checkpoint", "critic.checkpoint"])
def test_checkpoint_mbridge_config_is_refused_naming_megatron(section):
    assert typed_from().critic.checkpoint.mbridge_config == {}
    message = refusal_of(f"+{section}.mbridge_config.use_dist_checkpointing=true")
    assert f"{section}.mbridge_config" in message and "Megatron" in message
