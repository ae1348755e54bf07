"""Optimal Token Baseline (OTB; upstream's ``algorithm.adv_estimator=optimal_token_baseline``, arXiv 2602.07078).

A baseline per token instead of per trajectory. For the responses of one prompt (rows sharing a ``uid``):

    G_t   = sum_{j >= t} r_j                                  (reward-to-go)
    w_j   = (1 - 2 pi_j + sum_v pi_v^2) * rho_j^2             (the logit-gradient proxy of ||grad log pi||^2;
                                                                rho: rollout IS weights, 1 without them)
    W_t   = sum_{j <= t} w_j                                  ("realized energy", valid tokens only)
    B*_t  = sum_i G_t^i W_t^i / (sum_i W_t^i + eps)           (over the group's rows valid at t)
    A_t   = (G_t - B*_t) * mask_t

``pi_j`` is the sampled token's probability under the policy that sampled it (``old_log_probs``), ``sum_v pi_v^2``
the squared probabilities summed over the vocabulary (``sum_pi_squared``, from the actor's log-prob pass with
``actor.calculate_sum_pi_squared=true``). A group of one has no baseline (A = G). ``handle_zero_tail``: where one
response is the group's longest by itself, its tokens past the second-longest have no peer to form a baseline
from, so their baseline is 0 there instead of its own return.

``tir_optimal_token_baseline`` (multi-turn, tool-integrated) does the same on each row's valid tokens packed to
the left: tool-output tokens (mask 0 inside the response) are skipped, so the t-th generated token of every row
is compared with the t-th of the others, whatever tool text came between.
"""

from __future__ import annotations

from typing import Any

import torch

from verl.algos.advantage import _group_count, _group_ids
from verl.algos.registry import AdvantageEstimator, register_adv_est

__all__ = ["compute_optimal_token_baseline_advantage", "compute_multi_turn_optimal_token_baseline_advantage",
           "sum_pi_squared_from_logits"]


def sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """(..., V) logits -> float32 (...) sum_v softmax(logits)_v^2 = exp(logsumexp(2 l) - 2 logsumexp(l))."""
    logits = logits.float()
    return torch.exp(torch.logsumexp(2.0 * logits, dim=-1) - 2.0 * torch.logsumexp(logits, dim=-1))


def _needed(value: torch.Tensor | None, key: str) -> torch.Tensor:
    if value is None:
        how = ("set actor_rollout_ref.actor.calculate_sum_pi_squared=true (the actor's log-prob pass then returns it)"
               if key == "sum_pi_squared" else "the actor's log-prob pass returns it")
        raise ValueError(f"algorithm.adv_estimator=optimal_token_baseline needs batch[{key!r}]: {how}")
    return value


def _inputs(token_level_rewards, response_mask, old_log_probs, sum_pi_squared, rollout_is_weights):
    """(returns-to-go G, energy increments w) over the valid tokens, float64 so sums stay exact enough."""
    mask = response_mask.to(torch.float64)
    rewards = token_level_rewards.to(torch.float64) * mask
    returns = rewards.flip(-1).cumsum(-1).flip(-1)
    pi = _needed(old_log_probs, "old_log_probs").to(torch.float64).exp()
    w = 1.0 - 2.0 * pi + _needed(sum_pi_squared, "sum_pi_squared").to(torch.float64)
    if rollout_is_weights is not None:
        w = w * rollout_is_weights.to(torch.float64).square()
    return returns, w * mask, mask


def _rows_by_group(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """(groups, L): the rows of ``x`` summed per group."""
    n_groups = int(ids.max().item()) + 1 if ids.numel() else 0
    return x.new_zeros((n_groups, x.size(-1))).index_add_(0, ids, x)


def _baselines(returns: torch.Tensor, energy: torch.Tensor, mask: torch.Tensor, ids: torch.Tensor,
               lengths: torch.Tensor, handle_zero_tail: bool, epsilon: float) -> torch.Tensor:
    """B*_t per row (rows grouped by ``ids``), 0 for groups of one and, with handle_zero_tail, past a lone
    longest row's second-longest peer."""
    weight = energy * mask
    numerator = _rows_by_group(returns * weight, ids)
    denominator = _rows_by_group(weight, ids) + epsilon
    baselines = (numerator / denominator)[ids]
    count = _group_count(ids)
    baselines = torch.where((count > 1).unsqueeze(-1), baselines, torch.zeros_like(baselines))
    if handle_zero_tail:
        for group in torch.unique(ids).tolist():
            rows = torch.nonzero(ids == group).squeeze(-1)
            if rows.numel() < 2:
                continue
            group_lengths = lengths[rows]
            ordered = torch.sort(group_lengths).values
            longest, second = int(ordered[-1]), int(ordered[-2])
            if longest > second:  # a unique longest row
                row = int(rows[int(torch.argmax(group_lengths))])
                baselines[row, second:] = 0.0
    return baselines


@register_adv_est(AdvantageEstimator.OPTIMAL_TOKEN_BASELINE)
def compute_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    old_log_probs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB advantages and the returns-to-go (both (bs, R), zero on padding), by absolute response position."""
    returns, w, mask = _inputs(token_level_rewards, response_mask, old_log_probs, sum_pi_squared, rollout_is_weights)
    ids = _group_ids(index, token_level_rewards.size(0), token_level_rewards.device)
    energy = w.cumsum(-1)
    baselines = _baselines(returns, energy, mask, ids, mask.sum(-1).long(), handle_zero_tail, epsilon)
    dtype = token_level_rewards.dtype
    return ((returns - baselines) * mask).to(dtype), returns.to(dtype)


@register_adv_est(AdvantageEstimator.TIR_OPTIMAL_TOKEN_BASELINE)
def compute_multi_turn_optimal_token_baseline_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    old_log_probs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OTB on each row's generated tokens packed to the left (tool outputs inside the response skipped)."""
    returns, w, mask = _inputs(token_level_rewards, response_mask, old_log_probs, sum_pi_squared, rollout_is_weights)
    energy = w.cumsum(-1)
    valid = mask.bool()
    lengths = valid.sum(-1)
    # the k-th valid token of each row goes to column k of the packed layout
    order = torch.argsort((~valid).to(torch.int8), dim=-1, stable=True)
    packed_returns = torch.gather(returns, -1, order)
    packed_energy = torch.gather(energy, -1, order)
    packed_mask = torch.gather(mask, -1, order)
    rows = lengths > 0  # an empty row takes no part in its group's baseline
    ids = _group_ids(index, token_level_rewards.size(0), token_level_rewards.device)
    baselines = torch.zeros_like(packed_returns)
    if bool(rows.any()):
        kept = torch.nonzero(rows).squeeze(-1)
        _, dense = torch.unique(ids[kept], return_inverse=True)
        baselines[kept] = _baselines(packed_returns[kept], packed_energy[kept], packed_mask[kept], dense,
                                     lengths[kept], handle_zero_tail, epsilon)
    packed_advantages = (packed_returns - baselines) * packed_mask
    advantages = torch.zeros_like(returns).scatter_(-1, order, packed_advantages) * mask
    dtype = token_level_rewards.dtype
    return advantages.to(dtype), returns.to(dtype)
