"""ulysses_sequence_parallel_size for the actor, the reference and the critic is honoured (its effect:
tests/workers/test_ulysses*.py): accepted with remove padding and with GPUs it divides, the data-parallel size
becomes world / sp; the combinations the workers cannot run are refused naming the key."""

from __future__ import annotations

from tests.trainer.config.overrides_helpers import problems_of, set_keys
from verl.trainer.config import validate_config

ARR = "actor_rollout_ref"


def _sp2(cfg):
    # 2 GPUs, one SP group of 2: dp = 1, so every batch size below divides
    return set_keys(cfg, trainer__n_gpus_per_node=2, actor_rollout_ref__actor__ulysses_sequence_parallel_size=2,
                    critic__ulysses_sequence_parallel_size=2, algorithm__adv_estimator="gae")


def test_sp2_is_accepted_and_the_ref_follows_the_actor(cfg):
    typed = validate_config(_sp2(cfg), check_files=False)
    assert typed.actor_rollout_ref.actor.ulysses_sequence_parallel_size == 2
    assert typed.actor_rollout_ref.ref.ulysses_sequence_parallel_size == 2  # ${..actor.ulysses_...} in the yaml
    assert typed.critic.ulysses_sequence_parallel_size == 2


def test_sp_needs_remove_padding(cfg):
    set_keys(_sp2(cfg), actor_rollout_ref__model__use_remove_padding=False, critic__model__use_remove_padding=False)
    found = problems_of(cfg)
    assert any(p.startswith(f"{ARR}.actor.ulysses_sequence_parallel_size=2") and "use_remove_padding=true" in p
               for p in found), found
    assert any(p.startswith("critic.ulysses_sequence_parallel_size=2") and "use_remove_padding=true" in p
               for p in found), found


def test_ref_sp_must_match_the_actor(cfg):
    set_keys(_sp2(cfg), actor_rollout_ref__actor__use_kl_loss=True, actor_rollout_ref__ref__ulysses_sequence_parallel_size=1)
    found = problems_of(cfg)
    assert any(p.startswith(f"{ARR}.ref.ulysses_sequence_parallel_size=1 differs") for p in found), found


def test_sp_that_does_not_divide_the_gpus_is_refused(cfg):
    set_keys(cfg, trainer__n_gpus_per_node=2, critic__ulysses_sequence_parallel_size=3, algorithm__adv_estimator="gae")
    assert any("critic.ulysses_sequence_parallel_size" in p for p in problems_of(cfg))


def test_the_layout_is_logged_per_role_when_sp_is_on(cfg, caplog):
    import logging

    from verl.trainer.config.ulysses_checks import log_sequence_parallel_layout

    set_keys(cfg, trainer__n_gpus_per_node=2, actor_rollout_ref__actor__ulysses_sequence_parallel_size=2,
             actor_rollout_ref__actor__use_kl_loss=True, algorithm__adv_estimator="gae")
    typed = validate_config(cfg, check_files=False)
    with caplog.at_level(logging.INFO, logger="verl.trainer.config.ulysses_checks"):
        line = log_sequence_parallel_layout(typed)
    expected = "sequence parallel (Ulysses) over 2 ranks: actor 1 dp x 2 sp, ref 1 dp x 2 sp, critic 2 dp x 1 sp"
    assert line == expected
    assert [r.getMessage() for r in caplog.records] == [expected]


def test_no_layout_line_without_sp_nor_for_roles_the_run_does_not_build(cfg, caplog):
    import logging

    from verl.trainer.config.ulysses_checks import log_sequence_parallel_layout, sequence_parallel_layout

    set_keys(cfg, algorithm__adv_estimator="grpo", actor_rollout_ref__rollout__n=2)  # no KL: the actor alone
    typed = validate_config(cfg, check_files=False)
    with caplog.at_level(logging.INFO, logger="verl.trainer.config.ulysses_checks"):
        assert log_sequence_parallel_layout(typed) is None
    assert caplog.records == []
    set_keys(cfg, trainer__n_gpus_per_node=2, actor_rollout_ref__actor__ulysses_sequence_parallel_size=2)
    assert sequence_parallel_layout(validate_config(cfg, check_files=False)) == (
        "sequence parallel (Ulysses) over 2 ranks: actor 1 dp x 2 sp")
