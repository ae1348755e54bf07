"""Turning a (batch, response_len) loss matrix into a scalar, and the value and entropy losses."""

from __future__ import annotations

import torch

from verl.utils.torch_functional import entropy_from_logits
from verl.utils.torch_masked import masked_mean, masked_sum

# entropy_from_logits lives in verl.utils.torch_functional (the actor uses it too); re-exported for core_algos.
__all__ = ["LOSS_AGG_MODES", "agg_loss", "compute_value_loss", "compute_entropy_loss", "entropy_from_logits"]

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def _mean_over_sequences(seq_losses: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    # A row with no valid token (e.g. a padding row added to even out a micro-batch) is not a sequence.
    has_tokens = (loss_mask.to(seq_losses.dtype).sum(-1) > 0).to(seq_losses.dtype)
    return masked_mean(seq_losses, has_tokens)


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss over the valid tokens.

    - token-mean: mean over all valid tokens of the batch (long responses weigh more; DAPO's choice).
    - token-sum: sum over all valid tokens.
    - seq-mean-token-sum: per-sequence token sum, then mean over sequences.
    - seq-mean-token-mean: per-sequence token mean, then mean over sequences (the original GRPO).
    - seq-mean-token-sum-norm: per-sequence token sum, mean over sequences, divided by a constant
      ``loss_scale_factor`` (default: the padded length ``loss_mask.shape[-1]``) — Dr.GRPO. Unlike the other
      modes this depends on the padded length unless you fix ``loss_scale_factor``.
    """
    if loss_agg_mode == "token-mean":
        return masked_mean(loss_mat, loss_mask)
    if loss_agg_mode == "token-sum":
        return masked_sum(loss_mat, loss_mask)
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        loss = _mean_over_sequences(masked_sum(loss_mat, loss_mask, axis=-1), loss_mask)
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_scale_factor if loss_scale_factor is not None else loss_mask.shape[-1])
        return loss
    if loss_agg_mode == "seq-mean-token-mean":
        return _mean_over_sequences(masked_mean(loss_mat, loss_mask, axis=-1), loss_mask)
    raise ValueError(
        f"Invalid loss_agg_mode {loss_agg_mode!r} (actor/critic loss_agg_mode); use one of {LOSS_AGG_MODES}."
    )


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss (PPO): 0.5 * agg(max((v - R)^2, (clip(v, V_old - c, V_old + c) - R)^2)).

    Returns (vf_loss, vf_clipfrac); vf_clipfrac is a detached 0-dim tensor (fraction of valid tokens where
    the clipped term was the larger one). Gradient flows only through ``vpreds``.
    """
    returns = returns.detach()
    values = values.detach()
    vpred_clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    unclipped = (vpreds - returns).square()
    clipped = (vpred_clipped - returns).square()
    vf_loss = 0.5 * agg_loss(torch.maximum(unclipped, clipped), response_mask, loss_agg_mode, loss_scale_factor)
    vf_clipfrac = masked_mean(torch.gt(clipped, unclipped).to(vpreds.dtype), response_mask).detach()
    return vf_loss, vf_clipfrac


def compute_entropy_loss(
    logits: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str = "token-mean"
) -> torch.Tensor:
    """Aggregated token entropy of logits (batch, response_len, vocab)."""
    return agg_loss(entropy_from_logits(logits), response_mask, loss_agg_mode)
