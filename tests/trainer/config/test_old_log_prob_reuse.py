"""verl.trainer.config.old_log_prob_reuse: each condition under which the old-log-prob pass must stay keeps it,
and the one-epoch, one-mini-batch config skips it (only on steps whose actor update runs)."""

from __future__ import annotations

import pytest

from verl.protocol.keys import expected_keys
from verl.trainer.config import load_config, validate_config

RC = "algorithm.rollout_correction"
ENGINE_LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs=true"
# one epoch (the default) and one mini-batch: 8 prompts per step, 8 per optimizer step
ALL_CLEAR = ("data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8")


def typed(*overrides: str):
    return validate_config(load_config(list(overrides)), check_files=False)


def test_one_epoch_one_mini_batch_skips_the_pass():
    config = typed(*ALL_CLEAR)
    decision = config.old_log_prob_reuse
    assert decision.reuse and decision.blockers == ()
    assert decision.skips_pass(1) and decision.skips_pass(7)
    assert "skipping" in decision.describe()
    # the key table follows: no old_log_probs reach the update, so none are expected there
    assert "old_log_probs" not in expected_keys(config)


def test_rollout_n_does_not_change_the_count_of_mini_batches():
    # both sizes are in prompts; the workers multiply both by rollout.n
    assert typed(*ALL_CLEAR, "actor_rollout_ref.rollout.n=4").old_log_prob_reuse.reuse


# (overrides, what the blocker names, how many blockers): rollout correction always comes with the engine's
# log-probs, whose diff metrics block on their own too (bypass mode reports only itself: it has no pass at all)
@pytest.mark.parametrize(("overrides", "named", "count"), [
    (("algorithm.use_kl_in_reward=true",), "algorithm.use_kl_in_reward", 1),
    ((ENGINE_LOG_PROBS, f"{RC}.rollout_is=token"), "rollout_is=token", 2),
    ((ENGINE_LOG_PROBS, f"{RC}.rollout_rs=geometric"), "rollout_rs=geometric", 2),
    ((ENGINE_LOG_PROBS, f"{RC}.rollout_token_veto_threshold=1e-4"), "rollout_token_veto_threshold", 2),
    ((ENGINE_LOG_PROBS, f"{RC}.bypass_mode=true"), "bypass_mode", 1),
    ((ENGINE_LOG_PROBS,), "calculate_log_probs", 1),
    (("actor_rollout_ref.actor.ppo_epochs=2",), "ppo_epochs=2", 1),
    (("actor_rollout_ref.actor.ppo_mini_batch_size=4",), "ppo_mini_batch_size=4 < data.train_batch_size=8", 1),
], ids=["kl_in_reward", "rollout_is", "rollout_rs", "veto", "bypass", "engine_log_prob_metrics", "epochs",
        "mini_batches"])
def test_each_blocking_condition_keeps_the_pass(overrides, named, count):
    config = typed(*ALL_CLEAR, *overrides)
    decision = config.old_log_prob_reuse
    assert not decision.reuse
    assert any(named in blocker for blocker in decision.blockers), decision.blockers
    assert len(decision.blockers) == count, decision.blockers
    assert named in decision.describe()
    assert not decision.skips_pass(5)
    assert "old_log_probs" in expected_keys(config)


def test_two_blockers_are_both_reported():
    decision = typed("data.train_batch_size=16", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                     "actor_rollout_ref.actor.ppo_epochs=3").old_log_prob_reuse
    assert [b.split("=")[0] for b in decision.blockers] == ["actor_rollout_ref.actor.ppo_epochs",
                                                             "actor_rollout_ref.actor.ppo_mini_batch_size"]
    assert "4 mini-batches" in decision.blockers[1]


def test_critic_warmup_steps_keep_the_pass_for_the_entropy_metric():
    # no actor update in those steps: the pass is their only source of actor/entropy
    decision = typed(*ALL_CLEAR, "algorithm.adv_estimator=gae", "trainer.critic_warmup=2").old_log_prob_reuse
    assert decision.reuse
    assert [decision.skips_pass(step) for step in (1, 2, 3, 4)] == [False, False, True, True]
    assert "from step 3" in decision.describe()


@pytest.mark.parametrize("overrides", [("actor_rollout_ref.actor.entropy_coeff=0.01",),
                                       ("actor_rollout_ref.actor.policy_loss.loss_mode=gspo",),
                                       ("actor_rollout_ref.actor.use_kl_loss=true",),
                                       ("actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",)],
                         ids=["entropy_coeff", "gspo", "kl_loss", "seq_mean"])
def test_loss_settings_that_do_not_read_old_log_probs_early_still_skip(overrides):
    # the loss sees a constant old_log_prob either way, equal to the first forward's values
    assert typed(*ALL_CLEAR, *overrides).old_log_prob_reuse.reuse
