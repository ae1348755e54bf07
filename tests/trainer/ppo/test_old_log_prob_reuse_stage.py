"""The trainer's side of skipping the old-log-prob pass: the batch is flagged for the actor and the step's metric
says whether the pass ran; the decision is announced once, with its reasons when the pass stays."""

from __future__ import annotations

import torch

from verl.protocol import DataProto
from verl.trainer.config.old_log_prob_reuse import OldLogProbReuse
from verl.trainer.ppo.old_log_prob_reuse import SKIPPED_METRIC, announce, skip_old_log_prob_pass
from verl.workers.actor.on_policy import ON_POLICY_META_KEY, wants_on_policy


def _batch() -> DataProto:
    return DataProto.from_dict(tensors={"responses": torch.zeros(2, 3, dtype=torch.long)})


def test_a_skipping_step_flags_the_batch_for_the_actor():
    batch, metrics = _batch(), {}
    assert skip_old_log_prob_pass(OldLogProbReuse(reuse=True, blockers=()), batch, metrics, global_step=1)
    assert metrics == {SKIPPED_METRIC: 1.0}
    assert batch.meta_info[ON_POLICY_META_KEY] is True and wants_on_policy(batch)


def test_a_blocked_config_and_a_critic_warmup_step_leave_the_batch_alone():
    cases = [(OldLogProbReuse(reuse=False, blockers=("algorithm.use_kl_in_reward=true ...",)), 5),
             (OldLogProbReuse(reuse=True, blockers=(), critic_warmup=2), 2)]
    for decision, step in cases:
        batch, metrics = _batch(), {}
        assert not skip_old_log_prob_pass(decision, batch, metrics, global_step=step)
        assert metrics == {SKIPPED_METRIC: 0.0}
        assert ON_POLICY_META_KEY not in batch.meta_info and not wants_on_policy(batch)


def test_the_decision_is_announced_with_its_reasons(capsys):
    blocked = OldLogProbReuse(reuse=False, blockers=("actor_rollout_ref.actor.ppo_epochs=2: later epochs ...",))
    assert announce(blocked) is blocked
    assert "running the separate old-log-prob pass, because actor_rollout_ref.actor.ppo_epochs=2" in \
        capsys.readouterr().err
    announce(OldLogProbReuse(reuse=True, blockers=()))
    assert "[old_log_prob] skipping the separate old-log-prob pass" in capsys.readouterr().err
