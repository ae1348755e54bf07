"""Small upstream keys added for issue 33: critic.enable (honoured as upstream where it agrees with the estimator),
and the refused ones (checkpoint.async_save, rollout.skip_rollout / skip_dump_dir, critic / reward-model use_shm,
actor.use_fused_kernels, model.fused_kernel_options.impl_backend), each refused naming the key."""

from __future__ import annotations

import pytest

from tests.trainer.config.overrides_helpers import problems_of, set_keys
from verl.trainer.config import validate_config

ARR = "actor_rollout_ref"


def test_critic_enable_null_follows_the_estimator_and_true_with_gae_is_the_same(cfg):
    set_keys(cfg, algorithm__adv_estimator="gae")
    assert validate_config(cfg, check_files=False).use_critic is True
    set_keys(cfg, critic__enable=True)
    assert validate_config(cfg, check_files=False).use_critic is True
    set_keys(cfg, critic__enable=None, algorithm__adv_estimator="grpo")
    assert validate_config(cfg, check_files=False).use_critic is False


def test_critic_enable_contradicting_the_estimator_is_refused(cfg):
    set_keys(cfg, algorithm__adv_estimator="gae", critic__enable=False)
    assert any(p.startswith("critic.enable=false with algorithm.adv_estimator=gae") for p in problems_of(cfg))
    set_keys(cfg, algorithm__adv_estimator="grpo", critic__enable=True)
    assert any(p.startswith("critic.enable=true with algorithm.adv_estimator=grpo") for p in problems_of(cfg))


@pytest.mark.parametrize("dotted,value", [
    (f"{ARR}.actor.checkpoint.async_save", True),
    ("critic.checkpoint.async_save", True),
    (f"{ARR}.rollout.skip_rollout", True),
    (f"{ARR}.rollout.skip_dump_dir", "/tmp/elsewhere"),
    ("critic.model.use_shm", True),
    ("reward_model.model.use_shm", True),
    (f"{ARR}.actor.use_fused_kernels", True),
    (f"{ARR}.model.fused_kernel_options.impl_backend", "triton"),
])
def test_refused_keys_name_themselves(cfg, dotted, value):
    set_keys(cfg, algorithm__adv_estimator="gae", **{dotted.replace(".", "__"): value})
    assert any(dotted in p for p in problems_of(cfg))
