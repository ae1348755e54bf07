"""Upstream's truncated importance sampling of the policy loss (`actor_rollout_ref.actor.tis_imp_ratio_cap`).

The rollout engine samples from pi_rollout, which differs numerically from the trainer's pi_old; with a cap C > 0
each token's PPO loss (after the clip and the dual clip) is multiplied by

    w_t = min(exp(old_log_prob_t - rollout_log_prob_t), C)

treated as a constant (no gradient). C <= 0 (upstream's default -1) turns it off. It is the token level of
algorithm.rollout_correction.rollout_is (verl.algos.rollout_correction), which bounds the log-ratio to +-20 first
and can also reject or normalise; this is upstream's older single-knob spelling, applied in the actor's loss.
"""

from __future__ import annotations

import torch

__all__ = ["truncated_is_weights", "tis_weights"]


def truncated_is_weights(old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, cap: float) -> torch.Tensor:
    """min(exp(old_log_prob - rollout_log_prob), cap) per token, detached, in old_log_prob's dtype."""
    if not cap > 0:
        raise ValueError(f"actor_rollout_ref.actor.tis_imp_ratio_cap must be > 0 to weight the loss, got {cap}")
    if old_log_prob.shape != rollout_log_prob.shape:
        raise ValueError(f"truncated IS: old_log_prob {tuple(old_log_prob.shape)} and rollout_log_probs "
                         f"{tuple(rollout_log_prob.shape)} must have the same shape (batch, response_length)")
    log_ratio = old_log_prob.detach().float() - rollout_log_prob.detach().float()
    return torch.exp(log_ratio).clamp(max=cap).to(old_log_prob.dtype)


def tis_weights(old_log_prob: torch.Tensor, micro_batch, cap: float) -> torch.Tensor:
    """The weights for one micro-batch of the actor's update; its `rollout_log_probs` are the engine's."""
    if "rollout_log_probs" not in micro_batch.keys():
        raise ValueError("actor_rollout_ref.actor.tis_imp_ratio_cap > 0 needs the batch's rollout_log_probs: set "
                         "actor_rollout_ref.rollout.calculate_log_probs=true (or tis_imp_ratio_cap=-1).")
    return truncated_is_weights(old_log_prob, micro_batch["rollout_log_probs"], cap)
