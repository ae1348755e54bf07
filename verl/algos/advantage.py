"""Advantage estimators: token-level rewards -> (advantages, returns).

All tensors are (batch, response_len) with ``response_mask`` marking the valid response tokens; outcome
rewards sit on the last valid token. Outputs are zero on padding, and padding values (rewards, values) never
change a result. Group statistics (GRPO, RLOO, ...) group rows by ``index`` (the prompt ``uid``); a group of
one has baseline 0 (and std 1), so it keeps its raw reward instead of becoming 0/0.

Every estimator accepts ``**kwargs``: the trainer passes one common set of keyword arguments to all of them.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from verl.algos.registry import AdvantageEstimator, register_adv_est
from verl.utils.torch_masked import masked_sum, masked_whiten

__all__ = [
    "compute_gae_advantage_return",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_remax_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_gpg_outcome_advantage",
]


# ----------------------------------------------------------------------------------------------- helpers
def _group_ids(index: Sequence[Any] | np.ndarray | torch.Tensor, batch_size: int, device: torch.device) -> torch.Tensor:
    """Dense group number per row, in order of first appearance of each uid."""
    if index is None:
        raise ValueError(
            "This advantage estimator groups responses by prompt: pass `index` (non_tensor_batch['uid'], one id "
            "per prompt, shared by its rollout.n responses)."
        )
    keys = index.tolist() if isinstance(index, torch.Tensor | np.ndarray) else list(index)
    if len(keys) != batch_size:
        raise ValueError(f"`index` has {len(keys)} entries but the batch has {batch_size} rows; pass one uid per row.")
    numbering: dict[Any, int] = {}
    return torch.tensor([numbering.setdefault(k, len(numbering)) for k in keys], dtype=torch.long, device=device)


def _group_sum(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    n_groups = int(ids.max().item()) + 1 if ids.numel() else 0
    return torch.zeros(n_groups, dtype=x.dtype, device=x.device).index_add_(0, ids, x)


def _group_count(ids: torch.Tensor) -> torch.Tensor:
    return _group_sum(torch.ones_like(ids, dtype=torch.float64), ids)[ids]


def _group_mean(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Per-row mean of the row's group; 0 for a group of one (no baseline can be formed from itself)."""
    count = _group_count(ids)
    mean = _group_sum(x, ids)[ids] / count
    return torch.where(count > 1, mean, torch.zeros_like(mean))


def _group_std(x: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Per-row unbiased std of the row's group; 1 for a group of one (leave the score unscaled)."""
    count = _group_count(ids)
    mean = _group_sum(x, ids)[ids] / count
    sq = _group_sum((x - mean).square(), ids)[ids]
    var = sq / torch.where(count > 1, count - 1, torch.ones_like(count))
    return torch.where(count > 1, var.sqrt(), torch.ones_like(var))


def _outcome_scores(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    # float64: the mean of identical float32 rewards is then exact, so all-equal groups give exactly 0.
    return masked_sum(token_level_rewards.to(torch.float64), response_mask, axis=-1)


def _broadcast(per_row: torch.Tensor, response_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return (per_row.unsqueeze(-1) * response_mask.to(torch.float64)).to(dtype)


def _masked(x: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    return torch.where(response_mask.bool(), x, torch.zeros_like(x))


# ------------------------------------------------------------------------------------------- estimators
@register_adv_est(AdvantageEstimator.GAE)
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2015, arXiv:1506.02438).

    delta_t = r_t + gamma * V_{t+1} - V_t,  A_t = delta_t + gamma * lam * A_{t+1},  returns = A + V.
    Masked tokens inside a response (e.g. tool output in multi-turn) are skipped: they neither add a
    TD error nor break the chain. Advantages are whitened over the valid tokens of the batch.
    """
    if values is None:
        raise ValueError("GAE needs critic `values` (batch['values']); enable the critic or pick another estimator.")
    with torch.no_grad():
        valid = response_mask.bool()
        next_value = torch.zeros_like(values[:, 0])
        running_adv = torch.zeros_like(values[:, 0])
        advantages = torch.zeros_like(values)
        for t in reversed(range(values.shape[-1])):
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            candidate = delta + gamma * lam * running_adv
            running_adv = torch.where(valid[:, t], candidate, running_adv)
            next_value = torch.where(valid[:, t], values[:, t], next_value)
            advantages[:, t] = running_adv
        returns = _masked(advantages + values, response_mask)
        advantages = masked_whiten(advantages, response_mask)
    return advantages, returns


@register_adv_est(AdvantageEstimator.GRPO)
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (Shao et al. 2024, DeepSeekMath, arXiv:2402.03300): A_i = (r_i - mean_g) / (std_g + eps).

    ``norm_adv_by_std_in_grpo=False`` drops the std division: Dr.GRPO (Liu et al. 2025, arXiv:2503.20783).
    """
    with torch.no_grad():
        scores = _outcome_scores(token_level_rewards, response_mask)
        ids = _group_ids(index, scores.shape[0], scores.device)
        centred = scores - _group_mean(scores, ids)
        if norm_adv_by_std_in_grpo:
            centred = centred / (_group_std(scores, ids) + epsilon)
        advantages = _broadcast(centred, response_mask, token_level_rewards.dtype)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.GRPO_PASSK)
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k training (arXiv:2503.19595): only each group's best response is credited, with
    r_max - r_second_max (divided by the group std + eps unless ``norm_adv_by_std_in_grpo`` is off;
    the value in ``config`` wins, as upstream reads it from there).
    """
    normalize = bool(norm_adv_by_std_in_grpo if config is None else config.norm_adv_by_std_in_grpo)
    with torch.no_grad():
        scores = _outcome_scores(token_level_rewards, response_mask)
        ids = _group_ids(index, scores.shape[0], scores.device)
        per_row = torch.zeros_like(scores)
        for group in torch.unique(ids).tolist():
            members = torch.nonzero(ids == group, as_tuple=True)[0]
            if members.numel() < 2:
                raise ValueError(
                    f"grpo_passk needs at least 2 responses per prompt (uid {index[members[0].item()]!r} has 1); "
                    "set actor_rollout_ref.rollout.n >= 2."
                )
            group_scores = scores[members]
            top2 = torch.topk(group_scores, 2)
            credit = top2.values[0] - top2.values[1]
            if normalize:
                credit = credit / (group_scores.std() + epsilon)
            per_row[members[top2.indices[0]]] = credit
        advantages = _broadcast(per_row, response_mask, token_level_rewards.dtype)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.RLOO)
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO (Ahmadian et al. 2024, arXiv:2402.14740): A_i = r_i - mean of the other responses' rewards."""
    with torch.no_grad():
        scores = _outcome_scores(token_level_rewards, response_mask)
        ids = _group_ids(index, scores.shape[0], scores.device)
        count = _group_count(ids)
        others_sum = _group_sum(scores, ids)[ids] - scores
        others_mean = others_sum / torch.where(count > 1, count - 1, torch.ones_like(count))
        per_row = scores - torch.where(count > 1, others_mean, torch.zeros_like(others_mean))
        advantages = _broadcast(per_row, response_mask, token_level_rewards.dtype)
    return advantages, advantages


# Upstream keeps a loop and a vectorized version of GRPO and RLOO; ours are vectorized, so upstream's vectorized
# names (and config values) are the same functions (tests/algos/test_upstream_algos_api.py checks the results).
compute_grpo_vectorized_outcome_advantage = register_adv_est(AdvantageEstimator.GRPO_VECTORIZED)(
    compute_grpo_outcome_advantage
)
compute_rloo_vectorized_outcome_advantage = register_adv_est(AdvantageEstimator.RLOO_VECTORIZED)(
    compute_rloo_outcome_advantage
)


def _discounted_returns(rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """G_t = r_t + gamma * G_{t+1} over valid tokens; masked tokens are skipped, as in GAE."""
    valid = response_mask.bool()
    running = torch.zeros_like(rewards[:, 0])
    returns = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[-1])):
        running = torch.where(valid[:, t], rewards[:, t] + gamma * running, running)
        returns[:, t] = running
    return _masked(returns, response_mask)


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    gamma: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (Hu 2025, arXiv:2501.03262): discounted returns, whitened over the batch.

    ``gamma`` comes from the keyword, else ``config.gamma`` (the algorithm config).
    """
    if gamma is None and config is None:
        raise TypeError("compute_reinforce_plus_plus_outcome_advantage needs gamma= or config= (the algorithm config)")
    discount = gamma if gamma is not None else config.gamma
    with torch.no_grad():
        returns = _discounted_returns(token_level_rewards, response_mask, discount)
        advantages = masked_whiten(returns, response_mask)
    return advantages, returns


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline (arXiv:2501.03262): subtract the group mean reward, then whiten over all
    valid tokens of the batch (so long responses weigh more in the batch statistics, as upstream)."""
    with torch.no_grad():
        scores = _outcome_scores(token_level_rewards, response_mask)
        ids = _group_ids(index, scores.shape[0], scores.device)
        centred = _broadcast(scores - _group_mean(scores, ids), response_mask, torch.float64)
        advantages = masked_whiten(centred, response_mask).to(token_level_rewards.dtype)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.REMAX)
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (Li et al. 2023, arXiv:2310.10505): returns-to-go minus the greedy response's reward."""
    if reward_baselines is None:
        raise ValueError(
            "remax needs `reward_baselines` (batch['reward_baselines'], the reward of the greedy response, "
            "shape (batch,)); the trainer produces it when algorithm.adv_estimator=remax."
        )
    with torch.no_grad():
        rewards = _masked(token_level_rewards, response_mask)
        returns = _masked(rewards.flip(-1).cumsum(-1).flip(-1), response_mask)
        advantages = _masked(returns - reward_baselines.to(returns.dtype).unsqueeze(-1), response_mask)
    return advantages, returns


@register_adv_est(AdvantageEstimator.OPO)
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO (Hao et al. 2025, arXiv:2505.23585): baseline = length-weighted mean reward of the group,
    b = sum_j |o_j| r_j / sum_j |o_j| (0 for a group of one)."""
    with torch.no_grad():
        scores = _outcome_scores(token_level_rewards, response_mask)
        lengths = response_mask.to(torch.float64).sum(-1)
        ids = _group_ids(index, scores.shape[0], scores.device)
        weighted = _group_sum(lengths * scores, ids)[ids]
        total_len = _group_sum(lengths, ids)[ids]
        baseline = weighted / torch.where(total_len > 0, total_len, torch.ones_like(total_len))
        baseline = torch.where(_group_count(ids) > 1, baseline, torch.zeros_like(baseline))
        advantages = _broadcast(scores - baseline, response_mask, token_level_rewards.dtype)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.GPG)
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    alpha: float | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG (Chu et al. 2025, arXiv:2504.02546): A_i = alpha * (r_i - mean_g) / f_norm, no std division.

    alpha defaults to batch_size / (number of rows with a non-zero reward), as in upstream verl.
    """
    with torch.no_grad():
        scores = _outcome_scores(token_level_rewards, response_mask)
        ids = _group_ids(index, scores.shape[0], scores.device)
        if alpha is None:
            nonzero = torch.count_nonzero(scores).clamp(min=1).to(torch.float64)
            alpha = scores.shape[0] / nonzero
        per_row = alpha * (scores - _group_mean(scores, ids)) / f_norm
        advantages = _broadcast(per_row, response_mask, token_level_rewards.dtype)
    return advantages, advantages
