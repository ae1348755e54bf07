"""actor_rollout_ref.actor.tis_imp_ratio_cap before Ray (verl.trainer.config.tis_checks); the math: tests/algos/test_tis.py."""

from __future__ import annotations

from tests.trainer.config.overrides_helpers import problems_of, set_keys
from verl.trainer.config import validate_config

ARR = "actor_rollout_ref"


def test_checks_before_ray(cfg):
    set_keys(cfg, actor_rollout_ref__actor__tis_imp_ratio_cap=2.0)
    problems = problems_of(cfg)
    assert any(p.startswith(f"{ARR}.actor.tis_imp_ratio_cap=2.0 weights the loss") and
               "calculate_log_probs=true" in p for p in problems)
    set_keys(cfg, actor_rollout_ref__rollout__calculate_log_probs=True)
    typed = validate_config(cfg, check_files=False)  # valid: the engine's log-probs reach the actor
    assert typed.actor_rollout_ref.actor.tis_imp_ratio_cap == 2.0
    set_keys(cfg, actor_rollout_ref__actor__policy_loss__loss_mode="gspo")
    assert any("policy_loss.loss_mode=gspo" in p for p in problems_of(cfg))
    set_keys(cfg, actor_rollout_ref__actor__policy_loss__loss_mode="vanilla", algorithm__rollout_correction__rollout_is="token")
    assert any("both weight the loss" in p for p in problems_of(cfg))


def test_cudagraph_capture_sizes_before_ray(cfg):
    """rollout.cudagraph_capture_sizes (verl.trainer.config.cudagraph_checks); its effect:
    tests/workers/rollout/test_cudagraph_capture_sizes.py."""
    set_keys(cfg, actor_rollout_ref__rollout__cudagraph_capture_sizes=[1, 2, 4])
    assert any(p.startswith(f"{ARR}.rollout.cudagraph_capture_sizes=[1, 2, 4] chooses") and "enforce_eager=false" in p
               for p in problems_of(cfg))
    set_keys(cfg, actor_rollout_ref__rollout__enforce_eager=False, actor_rollout_ref__rollout__cudagraph_capture_sizes=[0])
    assert any("give a list of positive batch sizes" in p for p in problems_of(cfg))
    set_keys(cfg, actor_rollout_ref__rollout__cudagraph_capture_sizes=[1, 2, 4])
    typed = validate_config(cfg, check_files=False)
    assert typed.actor_rollout_ref.rollout.cudagraph_capture_sizes == [1, 2, 4]
