"""Per-token KL estimators between the policy and the reference, and the KL coefficient controllers.

Estimators follow Schulman, "Approximating KL Divergence" (2020, http://joschu.net/blog/kl-approx.html),
with x = log pi - log pi_ref sampled from pi:
  k1 ("kl"):          x                          unbiased, high variance, can be negative
  "abs":              |x|
  k2 ("mse"):         x^2 / 2                    biased, but its gradient is the right one
  k3 ("low_var_kl"):  exp(-x) - 1 + x            unbiased, >= 0, low variance; clamped to [0, 10]
A trailing "+" ("k1+", "k3+", ...) keeps the value of the named estimator and takes the gradient of k2
(straight-through), because the expected gradient of k1 and k3 is not the gradient of the KL.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = [
    "KL_ESTIMATORS",
    "kl_penalty",
    "kl_penalty_forward",
    "compute_rewards",
    "FixedKLController",
    "AdaptiveKLController",
    "get_kl_controller",
]

KL_ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")


def kl_penalty_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """The value of one estimator (no straight-through)."""
    if kl_penalty in ("kl", "k1"):
        return logprob - ref_logprob
    if kl_penalty == "abs":
        return (logprob - ref_logprob).abs()
    if kl_penalty in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if kl_penalty in ("low_var_kl", "k3"):
        # With y = log pi_ref - log pi: k3 = e^y - 1 - y. expm1 keeps it accurate (and >= 0) near y = 0,
        # the clamps keep exp() finite; the lower clamp at 0 only removes rounding noise.
        y = torch.clamp(ref_logprob - logprob, min=-20.0, max=20.0)
        return torch.clamp(torch.expm1(y) - y, min=0.0, max=10.0)
    if kl_penalty == "full":
        raise NotImplementedError(
            "kl_penalty='full' needs the whole vocabulary distribution, which is not passed here; "
            "use one of " + ", ".join(KL_ESTIMATORS)
        )
    raise ValueError(
        f"Unknown KL estimator {kl_penalty!r} (algorithm.kl_penalty / actor.kl_loss_type); use one of "
        f"{KL_ESTIMATORS}, optionally with a trailing '+' for the straight-through k2 gradient."
    )


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate; see the module docstring for the names."""
    straight_through = kl_penalty.endswith("+")
    base = kl_penalty[:-1] if straight_through else kl_penalty
    value = kl_penalty_forward(logprob, ref_logprob, base)
    if not straight_through or base in ("mse", "k2"):
        return value
    k2 = 0.5 * (logprob - ref_logprob).square()
    return k2 - k2.detach() + value.detach()


def compute_rewards(
    token_level_scores: torch.Tensor, old_log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_ratio: float
) -> torch.Tensor:
    """scores - kl_ratio * (log pi_old - log pi_ref), the k1 KL-in-reward of the original RLHF recipe."""
    return token_level_scores - kl_ratio * (old_log_prob - ref_log_prob)


class FixedKLController:
    """A constant KL coefficient."""

    def __init__(self, kl_coef: float) -> None:
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        return None


class AdaptiveKLController:
    """Proportional controller towards a target KL (Ziegler et al. 2019, arXiv:1909.08593):
    value *= 1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: float) -> None:
        self.value = init_kl_coef
        self.target = target_kl
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        error = float(np.clip(current_kl / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + error * n_steps / self.horizon


def get_kl_controller(kl_ctrl: Any) -> FixedKLController | AdaptiveKLController:
    """Build the controller described by `algorithm.kl_ctrl` (type: fixed | adaptive, kl_coef, target_kl, horizon)."""
    kind = kl_ctrl.type
    kl_coef = kl_ctrl.kl_coef
    if kind == "fixed":
        return FixedKLController(kl_coef=kl_coef)
    if kind == "adaptive":
        horizon = kl_ctrl.horizon
        target_kl = kl_ctrl.target_kl
        if not horizon > 0:
            raise ValueError(f"algorithm.kl_ctrl.horizon must be > 0 for the adaptive controller (got {horizon}).")
        if not target_kl > 0:
            raise ValueError(f"algorithm.kl_ctrl.target_kl must be > 0 for the adaptive controller (got {target_kl}).")
        return AdaptiveKLController(init_kl_coef=kl_coef, target_kl=target_kl, horizon=horizon)
    raise ValueError(f"Unknown algorithm.kl_ctrl.type {kind!r}; use 'fixed' or 'adaptive'.")
