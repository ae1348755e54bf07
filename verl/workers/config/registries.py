"""Names the config accepts for registry-backed keys.

The known names are listed here so checking a config never needs torch; a name outside the list is
still accepted when the registry it belongs to (imported only then) has it, so users who register
their own estimator, policy loss or reward manager keep working.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping

ADV_ESTIMATORS = (
    "gae",
    "grpo",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "remax",
    "rloo",
    "opo",
    "grpo_passk",
    "gpg",
    "grpo_vectorized",
    "rloo_vectorized",
    "optimal_token_baseline",
    "tir_optimal_token_baseline",
)

# Estimators whose baseline is the other responses to the same prompt: with one response per prompt
# every advantage is zero and nothing is learned.
GROUP_ADV_ESTIMATORS = (
    "grpo", "grpo_passk", "rloo", "opo", "reinforce_plus_plus_baseline", "gpg", "grpo_vectorized", "rloo_vectorized"
)

POLICY_LOSSES = ("vanilla", "gspo", "gpg", "clip_cov", "kl_cov", "geo_mean", "reinforce", "cispo", "sapo")

REWARD_MANAGERS = ("naive", "batch", "dapo", "prime", "rate_limited")


def _in_registry(module_name: str, registry_attr: str, getter_attr: str, name: str) -> bool:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and module_name.startswith(e.name):
            return False  # the registry module itself is absent, so nothing extra is registered
        raise
    registry = getattr(module, registry_attr, None)
    if isinstance(registry, Mapping):
        return name in registry
    getter = getattr(module, getter_attr, None)
    if getter is None:
        return False
    try:
        getter(name)
    except (KeyError, ValueError, NotImplementedError):
        return False
    return True


def adv_estimator_registered(name: str) -> bool:
    return _in_registry("verl.trainer.ppo.core_algos", "ADV_ESTIMATOR_REGISTRY", "get_adv_estimator_fn", name)


def policy_loss_registered(name: str) -> bool:
    return _in_registry("verl.trainer.ppo.core_algos", "POLICY_LOSS_REGISTRY", "get_policy_loss_fn", name)


def reward_manager_registered(name: str) -> bool:
    return _in_registry("verl.workers.reward_manager", "REWARD_MANAGER_REGISTRY", "get_reward_manager_cls", name)


LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")

# k1/k2/k3 are the names from Schulman's "Approximating KL divergence"; kl/mse/low_var_kl are upstream's aliases.
# A trailing "+" keeps the value but takes the gradient of k2 (straight-through). "full" (whole-vocabulary KL)
# is not offered: it needs logits the workers do not keep.
_KL_BASE = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
KL_PENALTIES = _KL_BASE + tuple(f"{name}+" for name in _KL_BASE)
