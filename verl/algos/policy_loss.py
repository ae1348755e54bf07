"""Policy-gradient losses of the PPO family, registered by their `policy_loss.loss_mode` names.

Every loss: fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
rollout_is_weights=None) -> (pg_loss, metrics). ``config`` is the actor config (an ``FSDPActorConfig``; the built-in
losses read its attributes: clip ratios, ``policy_loss.*``). Metrics are python floats under "actor/pg_clipfrac", "actor/ppo_kl" and
"actor/pg_clipfrac_lower" (0.0 where a loss has no such notion). Gradients flow only through ``log_prob``:
old log-probs, advantages and importance weights are treated as data.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algos.losses import agg_loss
from verl.algos.registry import register_policy_loss
from verl.utils.torch_masked import masked_mean

__all__ = [
    "clip_ranges",
    "pg_metrics",
    "aggregate_pg_losses",
    "compute_policy_loss",
    "compute_policy_loss_vanilla",
    "compute_policy_loss_gspo",
    "compute_policy_loss_gpg",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_cispo",
    "compute_policy_loss_sapo",
    "compute_policy_loss_reinforce",
]

# exp() of a log-ratio beyond this overflows float32 soon after; a policy that far off is already broken.
LOG_RATIO_CLAMP = 20.0


def require_actor_config(config: Any, loss: str) -> Any:
    if config is None:
        raise TypeError(f"policy loss {loss!r} needs config= the actor config (actor_rollout_ref.actor, an FSDPActorConfig)")
    return config


def clip_ranges(config: Any) -> tuple[float, float]:
    """(clip_ratio_low, clip_ratio_high) from the actor config; a null one follows clip_ratio, as upstream."""
    config = require_actor_config(config, "clip")
    low, high = config.clip_ratio_low, config.clip_ratio_high
    return (config.clip_ratio if low is None else low), (config.clip_ratio if high is None else high)


def pg_metrics(pg_clipfrac: Any = 0.0, ppo_kl: Any = 0.0, pg_clipfrac_lower: Any = 0.0) -> dict[str, float]:
    def as_float(x: Any) -> float:
        return float(x.detach().item()) if isinstance(x, torch.Tensor) else float(x)

    return {
        "actor/pg_clipfrac": as_float(pg_clipfrac),
        "actor/ppo_kl": as_float(ppo_kl),
        "actor/pg_clipfrac_lower": as_float(pg_clipfrac_lower),
    }


def aggregate_pg_losses(
    pg_losses: torch.Tensor, mask: torch.Tensor, mode: str, config: Any, is_w: torch.Tensor | None
) -> torch.Tensor:
    """agg_loss with optional importance weights (constants); the actor section's ``loss_scale_factor`` is
    seq-mean-token-sum-norm's divisor (null: the padded response length), as upstream."""
    if is_w is not None:
        pg_losses = pg_losses * is_w.detach()
    return agg_loss(pg_losses, mask, mode, getattr(config, "loss_scale_factor", None))


def _dual_clip_ppo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token dual-clip PPO loss and its (clipfrac, ppo_kl, clipfrac_lower)."""
    if not clip_ratio_c > 1.0:
        raise ValueError(
            f"actor_rollout_ref.actor.clip_ratio_c must be > 1.0 for dual-clip PPO (got {clip_ratio_c}); "
            "the usual value is 3.0."
        )
    log_ratio = torch.clamp(log_prob - old_log_prob.detach(), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    advantages = advantages.detach()
    ppo_kl = masked_mean(-log_ratio, response_mask)

    surrogate = -advantages * ratio
    clipped_surrogate = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    ppo_loss = torch.maximum(surrogate, clipped_surrogate)
    clipfrac = masked_mean(torch.gt(clipped_surrogate, surrogate).to(ratio.dtype), response_mask)

    # Dual clip: with A < 0 a huge ratio would make the loss unbounded; cap it at -A * c.
    dual_cap = -advantages * clip_ratio_c
    capped = torch.minimum(ppo_loss, dual_cap)
    negative = advantages < 0
    clipfrac_lower = masked_mean((torch.gt(ppo_loss, dual_cap) & negative).to(ratio.dtype), response_mask)
    return torch.where(negative, capped, ppo_loss), clipfrac, ppo_kl, clipfrac_lower


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO clipped surrogate (Schulman et al. 2017, arXiv:1707.06347) with asymmetric clip-higher
    (DAPO, arXiv:2503.14476: clip_ratio_low / clip_ratio_high) and dual-clip for negative advantages
    (Ye et al. 2019, arXiv:1912.09729: clip_ratio_c). The log-ratio is clamped to [-20, 20]."""
    clip_low, clip_high = clip_ranges(config)
    losses, clipfrac, ppo_kl, clipfrac_lower = _dual_clip_ppo(
        old_log_prob, log_prob, advantages, response_mask, clip_low, clip_high, config.clip_ratio_c
    )
    pg_loss = aggregate_pg_losses(losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    return pg_loss, pg_metrics(clipfrac, ppo_kl, clipfrac_lower)


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float | None = None,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The older upstream entry point (explicit clip ranges) -> (pg_loss, clipfrac, ppo_kl, clipfrac_lower)
    as tensors. New code should use get_policy_loss_fn("vanilla")."""
    if cliprange is None and (cliprange_low is None or cliprange_high is None):
        raise ValueError("compute_policy_loss needs `cliprange` (or both cliprange_low and cliprange_high).")
    low = cliprange_low if cliprange_low is not None else cliprange
    high = cliprange_high if cliprange_high is not None else cliprange
    losses, clipfrac, ppo_kl, clipfrac_lower = _dual_clip_ppo(
        old_log_prob, log_prob, advantages, response_mask, low, high, clip_ratio_c
    )
    return agg_loss(losses, response_mask, loss_agg_mode), clipfrac, ppo_kl, clipfrac_lower


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO (Zheng et al. 2025, arXiv:2507.18071): clip the sequence-level ratio
    s_i = exp(mean_t log(pi/pi_old)), with per-token gradient s_i * grad log pi_t (token ratio
    sg[s_i] * pi_t / sg[pi_t]). Always aggregated seq-mean-token-mean, as the paper's objective is;
    ``loss_agg_mode`` is ignored."""
    clip_low, clip_high = clip_ranges(config)
    advantages = advantages.detach()
    log_ratio = log_prob - old_log_prob.detach()
    seq_log_ratio = masked_mean(log_ratio, response_mask, axis=-1)
    token_log_ratio = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(token_log_ratio, max=10.0))

    surrogate = -advantages * ratio
    clipped_surrogate = -advantages * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    losses = torch.maximum(surrogate, clipped_surrogate)
    pg_loss = aggregate_pg_losses(losses, response_mask, "seq-mean-token-mean", config, rollout_is_weights)
    clipfrac = masked_mean(torch.gt(clipped_surrogate, surrogate).to(ratio.dtype), response_mask)
    return pg_loss, pg_metrics(clipfrac, masked_mean(-log_ratio, response_mask), 0.0)


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GPG (Chu et al. 2025, arXiv:2504.02546): plain policy gradient -A * log pi, no ratio, no clip."""
    losses = -advantages.detach() * log_prob
    pg_loss = aggregate_pg_losses(losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    ppo_kl = masked_mean(old_log_prob.detach() - log_prob.detach(), response_mask)
    return pg_loss, pg_metrics(0.0, ppo_kl, 0.0)


@register_policy_loss("reinforce")
def compute_policy_loss_reinforce(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """REINFORCE (Williams 1992): -A * log pi, optionally times importance weights w (treated as
    constants) to correct for a rollout policy that differs from the trained one."""
    losses = -advantages.detach() * log_prob
    pg_loss = aggregate_pg_losses(losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    ppo_kl = masked_mean(old_log_prob.detach() - log_prob.detach(), response_mask)
    return pg_loss, pg_metrics(0.0, ppo_kl, 0.0)


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GMPO (Zhao et al. 2025, arXiv:2507.20673): maximise the geometric mean of the token ratios.

    Token log-ratios are clipped in log space to [-clip_ratio_low, clip_ratio_high] (the pessimistic side
    for the sign of A; GMPO suggests 0.4), averaged over the sequence and exponentiated; the loss is
    -mean_seq(A_seq * ratio_seq) over sequences with at least one valid token. Supports sequence-level
    advantages (A is averaged over the sequence); ``loss_agg_mode`` is not used.
    """
    clip_low, clip_high = clip_ranges(config)
    log_ratio = log_prob - old_log_prob.detach()
    advantages = advantages.detach()
    sign = torch.sign(advantages)
    clipped_log_ratio = torch.clamp(log_ratio, -clip_low, clip_high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped_log_ratio)

    seq_ratio = torch.exp(masked_mean(pessimistic, response_mask, axis=-1))
    seq_adv = masked_mean(advantages, response_mask, axis=-1)
    seq_losses = -seq_adv * seq_ratio
    if rollout_is_weights is not None:
        log_w = torch.log(rollout_is_weights.detach().clamp(min=1e-10))
        seq_losses = seq_losses * torch.exp(masked_mean(log_w, response_mask, axis=-1))
    has_tokens = (response_mask.sum(-1) > 0).to(seq_losses.dtype)
    pg_loss = masked_mean(seq_losses, has_tokens)

    was_clipped = torch.ne(log_ratio, clipped_log_ratio)
    clipfrac = masked_mean((was_clipped & (advantages > 0)).to(log_ratio.dtype), response_mask)
    clipfrac_lower = masked_mean((was_clipped & (advantages < 0)).to(log_ratio.dtype), response_mask)
    return pg_loss, pg_metrics(clipfrac, masked_mean(-log_ratio, response_mask), clipfrac_lower)


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, arXiv:2506.13585): -sg(clip(ratio, 1 - low, 1 + high)) * A * log pi.

    Clipping the importance weight instead of the update keeps a gradient on every token.
    """
    clip_low, clip_high = clip_ranges(config)
    log_ratio = torch.clamp(log_prob.detach() - old_log_prob.detach(), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    losses = -clipped_ratio * advantages.detach() * log_prob
    pg_loss = aggregate_pg_losses(losses, response_mask, loss_agg_mode, config, rollout_is_weights)
    clipfrac = masked_mean(torch.ne(ratio, clipped_ratio).to(ratio.dtype), response_mask)
    return pg_loss, pg_metrics(clipfrac, masked_mean(-log_ratio, response_mask), 0.0)


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """SAPO (Gao et al. 2025, arXiv:2511.20347): a soft gate instead of a hard clip,
    loss = -f_tau(ratio) * A with f_tau(r) = sigmoid(tau (r - 1)) * 4 / tau, tau = tau_pos (1.0) when
    A > 0 else tau_neg (1.05). At r = 1 the gradient equals the unclipped one; it decays smoothly away
    from 1. Always aggregated seq-mean-token-mean, as upstream; ``loss_agg_mode`` is ignored."""
    policy_loss = require_actor_config(config, "sapo").policy_loss
    tau_pos, tau_neg = policy_loss.tau_pos, policy_loss.tau_neg
    if tau_pos <= 0 or tau_neg <= 0:
        raise ValueError(f"actor_rollout_ref.actor.policy_loss.tau_pos/tau_neg must be > 0 (got {tau_pos}, {tau_neg}).")
    advantages = advantages.detach()
    log_ratio = torch.clamp(log_prob - old_log_prob.detach(), -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    tau = torch.where(advantages > 0, torch.full_like(ratio, tau_pos), torch.full_like(ratio, tau_neg))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    pg_loss = aggregate_pg_losses(-gate * advantages, response_mask, "seq-mean-token-mean", config, rollout_is_weights)
    return pg_loss, pg_metrics(0.0, masked_mean(-log_ratio, response_mask), 0.0)
