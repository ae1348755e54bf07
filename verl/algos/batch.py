"""The two driver-side algorithm steps that read and write a DataProto: KL-in-reward and advantages."""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable

import torch

from verl.algos.kl import AdaptiveKLController, FixedKLController
from verl.algos.kl import kl_penalty as kl_estimate
from verl.algos.registry import AdvantageEstimator, get_adv_estimator_fn
from verl.utils.torch_masked import masked_mean

if TYPE_CHECKING:
    from verl.protocol import DataProto

__all__ = ["apply_kl_penalty", "compute_advantage", "compute_pf_ppo_reweight_data"]


def _require(data: DataProto, key: str, why: str) -> torch.Tensor:
    if data.batch is None or key not in data.batch.keys():
        present = [] if data.batch is None else sorted(data.batch.keys())
        raise KeyError(f"batch[{key!r}] is missing ({why}); the batch has {present}.")
    return data.batch[key]


def apply_kl_penalty(
    data: DataProto, kl_ctrl: FixedKLController | AdaptiveKLController, kl_penalty: str = "kl"
) -> tuple[DataProto, dict[str, float]]:
    """token_level_rewards = token_level_scores - beta * KL(old policy || ref) on response tokens.

    beta is ``kl_ctrl.value`` before this step's update; the controller is then updated with the batch's
    mean per-sequence KL and n_steps = batch size. Metrics: actor/reward_kl_penalty (that KL) and
    actor/reward_kl_penalty_coeff (beta).
    """
    why = "needed by algorithm.use_kl_in_reward"
    response_mask = _require(data, "response_mask", why)
    scores = _require(data, "token_level_scores", why)
    kld = kl_estimate(_require(data, "old_log_probs", why), _require(data, "ref_log_prob", why), kl_penalty)
    kld = torch.where(response_mask.bool(), kld, torch.zeros_like(kld))
    beta = kl_ctrl.value
    data.batch["token_level_rewards"] = scores - beta * kld

    current_kl = float(masked_mean(kld, response_mask, axis=-1).mean().item())
    kl_ctrl.update(current_kl=current_kl, n_steps=len(data))
    return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": float(beta)}


def _call_with_accepted_kwargs(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call fn with the keyword arguments it declares (all of them if it takes **kwargs), so estimators
    written for upstream verl's narrower calls still work."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return fn(**kwargs)
    names = {p.name for p in params}
    return fn(**{k: v for k, v in kwargs.items() if k in names})


def compute_advantage(
    data: DataProto,
    adv_estimator: str | AdvantageEstimator,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
) -> DataProto:
    """Run the registered estimator on the batch and write batch['advantages'] and batch['returns'].

    Reads token_level_rewards and response_mask, plus values, reward_baselines, old_log_probs, sum_pi_squared,
    rollout_is_weights and non-tensor uid when present. ``config`` is the `algorithm` config, handed to the estimator. With ``config.use_pf_ppo`` the
    rows are then resampled (see compute_pf_ppo_reweight_data), so use the returned DataProto.
    ``num_repeat`` is accepted for upstream compatibility and unused.
    """
    estimator = get_adv_estimator_fn(adv_estimator)
    why = f"needed by algorithm.adv_estimator={getattr(adv_estimator, 'value', adv_estimator)}"
    kwargs: dict[str, Any] = {
        "token_level_rewards": _require(data, "token_level_rewards", why),
        "response_mask": _require(data, "response_mask", why),
        "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo,
        "config": config,
        "gamma": gamma,
        "lam": lam,
    }
    # Absent inputs go in as None so the estimator that needs one says which (rather than a TypeError).
    for key in ("values", "reward_baselines", "old_log_probs", "sum_pi_squared", "rollout_is_weights"):
        kwargs[key] = data.batch[key] if key in data.batch.keys() else None
    kwargs["index"] = data.non_tensor_batch.get("uid")
    advantages, returns = _call_with_accepted_kwargs(estimator, kwargs)
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    if config is not None and config.use_pf_ppo:
        data = compute_pf_ppo_reweight_data(data, config.pf_ppo.reweight_method, config.pf_ppo.weight_pow)
    return data


def _pf_ppo_weights(scores: torch.Tensor, reweight_method: str, weight_pow: float) -> torch.Tensor:
    if reweight_method == "pow":
        return scores.abs().pow(weight_pow)
    if reweight_method == "max_min":
        extreme = (scores == scores.max()) | (scores == scores.min())
        return extreme.to(scores.dtype)
    if reweight_method == "max_random":
        return torch.where(scores == scores.max(), 0.4, 0.1).to(scores.dtype)
    raise ValueError(
        f"Unknown algorithm.pf_ppo.reweight_method {reweight_method!r}; use 'pow', 'max_min' or 'max_random'."
    )


def compute_pf_ppo_reweight_data(data: DataProto, reweight_method: str = "pow", weight_pow: float = 2.0) -> DataProto:
    """PF-PPO (Shen et al. 2024, arXiv:2409.06957): resample the batch's rows, with replacement and to the
    same size, with probability growing with the sequence score (sum of token_level_scores):
    "pow" |s|^weight_pow, "max_min" only the best and worst, "max_random" 0.4 for the best, 0.1 otherwise.
    Uses torch's global generator. Returns a new DataProto."""
    scores = _require(data, "token_level_scores", "needed by algorithm.use_pf_ppo").sum(-1)
    weights = _pf_ppo_weights(scores, reweight_method, weight_pow).clamp(min=0) + 1e-8
    rows = torch.multinomial(weights.cpu().double(), len(data), replacement=True)
    return data.select_idxs(rows)
