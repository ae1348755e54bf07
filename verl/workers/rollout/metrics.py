"""How far the rollout engine's token probabilities are from the actor's recomputation of the same tokens.

A large gap is the classic silent bug of a hybrid engine (weights not synced, wrong temperature, a different
tokenizer): training then runs off-policy without any error. Precision alone gives a small gap (engine bf16 vs
actor fp32 on SmolLM2-135M: per-token |log-prob diff| mean ~0.04). Names follow upstream verl's metrics.
"""

from __future__ import annotations

import torch

__all__ = ["rollout_probs_diff_metrics"]


def rollout_probs_diff_metrics(rollout_log_probs: torch.Tensor, actor_log_probs: torch.Tensor,
                               response_mask: torch.Tensor) -> dict[str, float]:
    """|p_rollout - p_actor| over response tokens (max, mean, std) and the Pearson correlation of the two."""
    mask = response_mask.bool()
    if not mask.any():
        raise ValueError("rollout_probs_diff_metrics: response_mask selects no token")
    rollout = torch.exp(rollout_log_probs.float()[mask])
    actor = torch.exp(actor_log_probs.float()[mask])
    diff = (rollout - actor).abs()
    metrics = {
        "training/rollout_probs_diff_max": diff.max().item(),
        "training/rollout_probs_diff_mean": diff.mean().item(),
        "training/rollout_probs_diff_std": diff.std(unbiased=False).item(),
    }
    if rollout.numel() > 1 and rollout.std() > 0 and actor.std() > 0:
        stacked = torch.stack([rollout, actor])
        metrics["training/rollout_actor_probs_pearson_corr"] = torch.corrcoef(stacked)[0, 1].item()
    return metrics
