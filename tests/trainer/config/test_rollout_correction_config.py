"""algorithm.rollout_correction: upstream's keys and defaults, and the checks that run before Ray."""

from __future__ import annotations

import pytest

from verl.trainer.config import ConfigError, ConfigWarning, load_config, validate_config

RC = "algorithm.rollout_correction"
ON = "actor_rollout_ref.rollout.calculate_log_probs=true"


def typed(*overrides: str):
    return validate_config(load_config(list(overrides)), check_files=False)


def problems(*overrides: str) -> str:
    with pytest.raises(ConfigError) as err:
        typed(*overrides)
    return str(err.value)


def test_defaults_are_upstreams():
    rc = typed().algorithm.rollout_correction
    assert (rc.rollout_is, rc.rollout_is_threshold, rc.rollout_is_batch_normalize) == (None, 2.0, False)
    assert (rc.rollout_rs, rc.rollout_rs_threshold, rc.rollout_rs_threshold_lower) == (None, None, None)
    assert (rc.rollout_token_veto_threshold, rc.bypass_mode, rc.loss_type) == (None, False, "ppo_clip")
    assert not rc.enabled


@pytest.mark.parametrize("key", ["rollout_is=token", "rollout_rs=geometric", "rollout_token_veto_threshold=1e-4",
                                 "bypass_mode=true"])
def test_any_correction_needs_the_engines_log_probs(key):
    assert "actor_rollout_ref.rollout.calculate_log_probs=true" in problems(f"{RC}.{key}")
    typed(f"{RC}.{key}", ON)


def test_levels_and_loss_types_are_checked():
    assert f"{RC}.rollout_is" in problems(ON, f"{RC}.rollout_is=geometric")  # geometric is for rejection only
    assert f"{RC}.rollout_rs" in problems(ON, f"{RC}.rollout_rs=seq")
    assert f"{RC}.loss_type" in problems(ON, f"{RC}.bypass_mode=true", f"{RC}.loss_type=pg")


@pytest.mark.parametrize("key", ["rollout_is_threshold=0", "rollout_rs_threshold=-1",
                                 "rollout_rs_threshold_lower=0", "rollout_token_veto_threshold=-1e-4"])
def test_thresholds_must_be_positive(key):
    name = key.split("=")[0]
    assert f"{RC}.{name} must be > 0" in problems(ON, f"{RC}.rollout_is=token", f"{RC}.rollout_rs=token", f"{RC}.{key}")


def test_rejection_bounds_need_lower_below_upper():
    msg = problems(ON, f"{RC}.rollout_rs=token", f"{RC}.rollout_rs_threshold=0.8")  # 1/0.8 = 1.25 > 0.8
    assert "lower < upper" in msg and "rollout_rs_threshold" in msg
    assert "lower < upper" in problems(ON, f"{RC}.rollout_rs=token", f"{RC}.rollout_rs_threshold=2.0",
                                       f"{RC}.rollout_rs_threshold_lower=3.0")
    typed(ON, f"{RC}.rollout_rs=geometric", f"{RC}.rollout_rs_threshold=1.001")  # upstream's geometric range


def test_veto_must_be_below_one():
    assert "rollout_token_veto_threshold" in problems(ON, f"{RC}.rollout_token_veto_threshold=2.0")


def test_unused_settings_are_refused_not_ignored():
    assert "rollout_rs is null" in problems(ON, f"{RC}.rollout_is=token", f"{RC}.rollout_rs_threshold=3.0")
    assert "rollout_is is null" in problems(ON, f"{RC}.rollout_is_batch_normalize=true", f"{RC}.rollout_rs=token")
    assert "rollout_is_threshold" in problems(ON, f"{RC}.rollout_is_threshold=3.0")
    typed(ON, f"{RC}.rollout_is_threshold=3.0", f"{RC}.rollout_rs=token")  # the RS upper bound follows it


def test_loss_type_is_the_bypass_mode_loss():
    assert f"{RC}.bypass_mode=true" in problems(ON, f"{RC}.loss_type=reinforce")
    # upstream logs the IS weights with ppo_clip in bypass mode and applies none: a note, not a refusal
    with pytest.warns(ConfigWarning, match="logged .* but not applied"):
        typed(ON, f"{RC}.bypass_mode=true", f"{RC}.rollout_is=token")
    typed(ON, f"{RC}.bypass_mode=true", f"{RC}.rollout_is=token", f"{RC}.loss_type=reinforce")
    msg = problems(ON, f"{RC}.bypass_mode=true", f"{RC}.loss_type=reinforce",
                   "actor_rollout_ref.actor.policy_loss.loss_mode=gspo")
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=gspo" in msg
