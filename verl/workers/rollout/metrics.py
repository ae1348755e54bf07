"""How far the rollout engine's token probabilities are from the actor's recomputation of the same tokens.

A large gap is the classic silent bug of a hybrid engine (weights not synced, wrong temperature, a different
tokenizer): training then runs off-policy without any error. Precision alone gives a small gap (engine bf16 vs
actor fp32 on SmolLM2-135M: per-token |log-prob diff| mean ~0.04). Names follow upstream verl's metrics.
Upstream's path for this module is ``verl.utils.debug.metrics`` (an alias of this one).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["calculate_debug_metrics", "rollout_probs_diff_metrics"]


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


def calculate_debug_metrics(data: Any) -> dict[str, float]:
    """Upstream's entry point: the metrics above for a batch with ``rollout_log_probs``, ``old_log_probs`` and
    ``responses``, over the response part of ``loss_mask`` (else ``attention_mask``), plus
    ``training/rollout_probs_diff_valid`` = 1."""
    batch = data.batch
    for key in ("rollout_log_probs", "old_log_probs", "responses"):
        if key not in batch.keys():
            raise KeyError(f"calculate_debug_metrics: the batch has no {key!r}")
    mask_key = "loss_mask" if "loss_mask" in batch.keys() else "attention_mask"
    if mask_key not in batch.keys():
        raise KeyError("calculate_debug_metrics: the batch has neither 'loss_mask' nor 'attention_mask'")
    response_mask = batch[mask_key][:, -batch["responses"].shape[1]:]
    metrics = {"training/rollout_probs_diff_valid": 1}
    metrics.update(rollout_probs_diff_metrics(batch["rollout_log_probs"], batch["old_log_probs"], response_mask))
    return metrics
