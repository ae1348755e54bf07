"""Whether a training step may skip the actor's separate old-log-prob pass: the one place that decides it.

With one PPO epoch and one mini-batch the update takes a single optimizer step, and every micro-batch forward
before that step runs on the weights the pass would have used. Its log-probs *are* pi_old's, so the actor can use
their detached values as ``old_log_probs`` (the ratio is then exactly 1 at that forward, as PPO means it to be)
and the pass — a full no-grad forward over the batch — is redundant. Upstream verl's actor makes the same
observation (its ``on_policy`` flag) but still runs the pass.

It is not exact, so the pass stays, when something reads ``old_log_probs`` before the update, or the update runs
more than one forward per sample on moving weights:

- ``algorithm.use_kl_in_reward``: the KL penalty is folded into the rewards before the advantages;
- rollout correction (``algorithm.rollout_correction``): IS weights and rejection are computed from them before
  the advantages; in bypass mode there is no pass at all (``old_log_probs`` are the engine's);
- ``actor_rollout_ref.rollout.calculate_log_probs``: the rollout-vs-actor metrics (``training/rollout_probs_diff_*``)
  and the off-policy diagnostics compare the engine's log-probs with this pass's;
- ``actor.ppo_epochs`` > 1, or ``actor.ppo_mini_batch_size`` < ``data.train_batch_size`` (both count prompts, the
  workers multiply both by ``rollout.n``; dynamic sampling trims its batch to ``train_batch_size``): later
  mini-batches or epochs see weights the first optimizer step already moved.

What the pass also gave, ``actor/entropy``, the actor then computes from the update's own first-forward logits
(detached), aggregated over the whole batch exactly as the driver did. The policy-loss mode and ``entropy_coeff``
do not matter: the loss sees a constant ``old_log_prob`` either way, equal to the forward's values.
In critic-warmup steps (``trainer.critic_warmup``) the actor is not updated, so the pass still runs there: it is
then the only source of ``actor/entropy``.

This module reads the typed config only (no torch), so the key table (``verl.protocol.keys``) can ask it too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["OldLogProbReuse", "decide_old_log_prob_reuse"]


@dataclass(frozen=True)
class OldLogProbReuse:
    """``reuse``: the update's first forward stands in for the pass; ``blockers``: why not (empty when it does)."""

    reuse: bool
    blockers: tuple[str, ...]
    critic_warmup: int = 0

    def skips_pass(self, global_step: int) -> bool:
        """Whether step ``global_step`` (1-based) skips the pass: only steps whose actor update runs."""
        return self.reuse and global_step > self.critic_warmup

    def describe(self) -> str:
        """One line for the start-of-run log."""
        if self.reuse:
            warmup = (f" (from step {self.critic_warmup + 1}: the critic-warmup steps keep it for actor/entropy)"
                      if self.critic_warmup > 0 else "")
            return ("skipping the separate old-log-prob pass" + warmup + ": one PPO epoch and one mini-batch, so "
                    "old_log_probs are the update's first-forward log-probs (detached) and actor/entropy comes "
                    "from the same forward")
        return "running the separate old-log-prob pass, because " + "; ".join(self.blockers)


def decide_old_log_prob_reuse(config: Any) -> OldLogProbReuse:
    """The decision for a typed PPOTrainerConfig. Every blocker names its key and why the pass is needed."""
    alg = config.algorithm
    actor = config.actor_rollout_ref.actor
    rollout = config.actor_rollout_ref.rollout
    correction = alg.rollout_correction
    blockers: list[str] = []
    if alg.use_kl_in_reward:
        blockers.append("algorithm.use_kl_in_reward=true needs old_log_probs for the KL penalty before the advantages")
    if correction.bypass_mode:
        blockers.append("algorithm.rollout_correction.bypass_mode=true uses the engine's log-probs as old_log_probs "
                        "(there is no pass to skip)")
    elif correction.enabled:
        keys = ("rollout_is", "rollout_rs", "rollout_token_veto_threshold")
        on = [f"{key}={getattr(correction, key)}" for key in keys if getattr(correction, key) is not None]
        blockers.append(f"algorithm.rollout_correction ({', '.join(on)}) computes IS weights / rejection from "
                        "old_log_probs before the advantages")
    if rollout.calculate_log_probs and not correction.bypass_mode:
        blockers.append("actor_rollout_ref.rollout.calculate_log_probs=true: the rollout-vs-actor metrics compare "
                        "the engine's log-probs with this pass's")
    if getattr(actor, "calculate_sum_pi_squared", False):
        blockers.append("actor_rollout_ref.actor.calculate_sum_pi_squared=true: sum_pi_squared comes from the "
                        "log-prob pass, before the advantages (optimal_token_baseline)")
    if actor.ppo_epochs > 1:
        blockers.append(f"actor_rollout_ref.actor.ppo_epochs={actor.ppo_epochs}: later epochs run on updated weights")
    train_batch_size = config.data.train_batch_size
    if actor.ppo_mini_batch_size < train_batch_size:
        blockers.append(f"actor_rollout_ref.actor.ppo_mini_batch_size={actor.ppo_mini_batch_size} < "
                        f"data.train_batch_size={train_batch_size}: "
                        f"{-(-train_batch_size // actor.ppo_mini_batch_size)} mini-batches, the later ones on "
                        "updated weights")
    return OldLogProbReuse(reuse=not blockers, blockers=tuple(blockers), critic_warmup=config.trainer.critic_warmup)
