"""Covariance-based entropy-preserving losses: Clip-Cov and KL-Cov (Cui et al. 2025, "The Entropy
Mechanism of Reinforcement Learning for Reasoning Language Models", arXiv:2505.22617).

Entropy collapses through tokens whose log-prob and advantage covary strongly. Both losses find such
tokens by cov_t = (A_t - mean A) * (log pi_t - mean log pi) over the valid tokens of the batch:
Clip-Cov drops the gradient of a random few of them, KL-Cov adds a |log ratio| penalty to the top ones.
Settings live under `actor.policy_loss`: clip_cov_ratio, clip_cov_lb, clip_cov_ub, kl_cov_ratio, ppo_kl_coef.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algos.policy_loss import aggregate_pg_losses, clip_ranges, pg_metrics, require_actor_config
from verl.algos.registry import register_policy_loss
from verl.utils.torch_masked import masked_mean

__all__ = ["compute_policy_loss_clip_cov", "compute_policy_loss_kl_cov"]


def _positive(value: float, key: str) -> float:
    if not value > 0:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.{key} must be > 0 (got {value}).")
    return value


def _token_covariance(advantages: torch.Tensor, log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (advantages - masked_mean(advantages, mask)) * (log_prob - masked_mean(log_prob, mask))


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clip plus Clip-Cov: among valid, not already clipped tokens with clip_cov_lb < cov < clip_cov_ub,
    a random max(1, int(clip_cov_ratio * n_valid)) have their loss (and gradient) zeroed.
    The random choice uses torch's global generator (seed it for reproducibility).
    pg_clipfrac reports the fraction of tokens so dropped."""
    clip_cov_ratio = _positive(require_actor_config(config, "clip_cov").policy_loss.clip_cov_ratio, "clip_cov_ratio")
    clip_cov_lb = config.policy_loss.clip_cov_lb
    clip_cov_ub = config.policy_loss.clip_cov_ub
    clip_low, clip_high = clip_ranges(config)
    advantages = advantages.detach()
    valid = response_mask.bool()

    log_ratio = log_prob - old_log_prob.detach()
    ratio = torch.exp(log_ratio)
    surrogate = -advantages * ratio
    clipped_surrogate = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    already_clipped = torch.gt(clipped_surrogate, surrogate) & valid

    cov = _token_covariance(advantages, log_prob.detach(), response_mask)
    candidates = valid & ~already_clipped & (cov > clip_cov_lb) & (cov < clip_cov_ub)
    candidate_idx = torch.nonzero(candidates)
    n_drop = min(max(int(clip_cov_ratio * int(valid.sum().item())), 1), candidate_idx.shape[0])
    keep = torch.ones_like(advantages)
    if n_drop > 0:
        chosen = candidate_idx[torch.randperm(candidate_idx.shape[0])[:n_drop].to(candidate_idx.device)]
        keep[chosen[:, 0], chosen[:, 1]] = 0.0

    losses = torch.maximum(surrogate, clipped_surrogate) * keep
    pg_loss = aggregate_pg_losses(losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    dropped = masked_mean((keep == 0).to(ratio.dtype), response_mask)
    return pg_loss, pg_metrics(dropped, masked_mean(-log_ratio, response_mask), 0.0)


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Unclipped surrogate -A * ratio plus KL-Cov: the top max(1, int(kl_cov_ratio * n_valid)) tokens by
    covariance get + ppo_kl_coef * |log ratio|. As upstream, "actor/ppo_kl" reports the mean |log ratio|;
    pg_clipfrac reports the fraction of penalised tokens."""
    kl_cov_ratio = _positive(require_actor_config(config, "kl_cov").policy_loss.kl_cov_ratio, "kl_cov_ratio")
    ppo_kl_coef = config.policy_loss.ppo_kl_coef
    advantages = advantages.detach()
    valid = response_mask.bool()

    log_ratio = log_prob - old_log_prob.detach()
    abs_log_ratio = log_ratio.abs()
    ratio = torch.exp(log_ratio)

    penalised = torch.zeros_like(valid)
    n_valid = int(valid.sum().item())
    if n_valid > 0:
        cov = _token_covariance(advantages, log_prob.detach(), response_mask)
        valid_flat = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
        n_top = max(1, int(n_valid * kl_cov_ratio))
        top = torch.topk(cov.reshape(-1)[valid_flat], n_top).indices
        penalised.view(-1)[valid_flat[top]] = True

    losses = -advantages * ratio + torch.where(penalised, ppo_kl_coef * abs_log_ratio, torch.zeros_like(ratio))
    pg_loss = aggregate_pg_losses(losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    frac = masked_mean(penalised.to(ratio.dtype), response_mask)
    return pg_loss, pg_metrics(frac, masked_mean(abs_log_ratio, response_mask), 0.0)
