"""The `algorithm` section: advantage estimator, discounting, and KL control."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig
from verl.utils.config_errors import ConfigWarning
from verl.utils.config_schema import at_least, choice, refused
from verl.workers.config.registries import ADV_ESTIMATORS, KL_PENALTIES, adv_estimator_registered

KL_CTRL_TYPES = ("fixed", "adaptive")
PF_PPO_REWEIGHT_METHODS = ("pow", "max_min", "max_random")
FILTER_GROUPS_METRICS = ("acc", "score", "seq_reward", "seq_final_reward")


@dataclass
class KLControlConfig(BaseConfig):
    type: str = choice("fixed", KL_CTRL_TYPES)
    kl_coef: float = 0.001
    horizon: int = at_least(10000, 1)  # adaptive only
    target_kl: float = 0.1  # adaptive only


@dataclass
class PFPPOConfig(BaseConfig):
    """Policy-filtered PPO: resample the batch by reward before the update."""

    reweight_method: str = choice("pow", PF_PPO_REWEIGHT_METHODS)
    weight_pow: float = 2.0


@dataclass
class FilterGroupsConfig(BaseConfig):
    """DAPO's dynamic sampling: drop prompts whose responses all got the same `metric`, generate more
    (verl/trainer/ppo/dynamic_sampling.py)."""

    enable: bool = False
    metric: str | None = choice(None, FILTER_GROUPS_METRICS)  # required once enabled
    max_num_gen_batches: int = at_least(0, 0)  # generation rounds per step before giving up; 0: no limit
    # upstream after v0.7: how many train-batch-sized prompt batches its synchronous DAPO keeps generating at once
    max_inflight_gen_batches: int = refused(
        1, "generating several prompt batches concurrently while filtering groups is not built: here "
        "verl/trainer/ppo/dynamic_sampling.py generates one batch, filters it, and only then generates the next",
        "Leave algorithm.filter_groups.max_inflight_gen_batches at 1; max_num_gen_batches bounds the rounds.")


# the same names as verl.algos.rollout_correction's (a test keeps them equal): checking a config needs no torch
ROLLOUT_IS_LEVELS = ("token", "sequence")
ROLLOUT_RS_LEVELS = ("token", "sequence", "geometric")
ROLLOUT_CORRECTION_LOSS_TYPES = ("ppo_clip", "reinforce")
RC = "algorithm.rollout_correction"


@dataclass
class RolloutCorrectionConfig(BaseConfig):
    """Truncated IS and rejection sampling between the rollout engine's policy and the trainer's
    (verl/algos/rollout_correction.py; docs/rollout_correction.md). Any of rollout_is, rollout_rs, the veto or
    bypass_mode needs actor_rollout_ref.rollout.calculate_log_probs=true."""

    rollout_is: str | None = choice(None, ROLLOUT_IS_LEVELS)
    rollout_is_threshold: float = 2.0  # truncation C of the IS weights; also the RS upper bound when that is null
    rollout_is_batch_normalize: bool = False
    # token | sequence | geometric (ratio bounds), or upstream's divergence options token_k1 ... seq_max_k3,
    # comma separated to combine (verl.algos.rollout_rs); checked in rollout_correction_problems
    rollout_rs: str | None = None
    # ratio levels: the upper ratio (null: rollout_is_threshold); divergence options: one value or one per
    # option, comma separated ("0.6_1.6,2.5": lower_upper for *_k1, an upper bound for k2/k3), required
    rollout_rs_threshold: str | float | None = None
    rollout_rs_threshold_lower: float | None = None  # null: 1 / upper
    rollout_token_veto_threshold: float | None = None  # reject a sequence holding a token with ratio below this
    bypass_mode: bool = False  # old_log_probs := rollout_log_probs, no actor log-prob pass
    loss_type: str = choice("ppo_clip", ROLLOUT_CORRECTION_LOSS_TYPES)  # the bypass-mode loss

    @property
    def enabled(self) -> bool:
        """Whether anything acts on training (the diagnostics alone only need the engine's log-probs)."""
        return (self.rollout_is is not None or self.rollout_rs is not None
                or self.rollout_token_veto_threshold is not None or self.bypass_mode)


def _plain_number(value: Any) -> float | None:
    """A float from a number or a plain numeric string ("2.5", "1e-3"); None for anything else. Python's float()
    would also read "0.5_2" as 0.52 (digit grouping), which here is a k1 bound pair, never a number."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?", value.strip()):
        return float(value)
    return None


def _divergence_problems(rc: RolloutCorrectionConfig, problems: list[str]) -> bool:
    """Check rollout_rs's value; True when it names divergence options (their thresholds checked here too)."""
    from verl.algos.rollout_rs import is_divergence_spec, parse_rs_options, parse_rs_thresholds

    spec = rc.rollout_rs
    if spec is None:
        return False
    if not is_divergence_spec(spec):
        if spec not in ROLLOUT_RS_LEVELS:
            problems.append(f"{RC}.rollout_rs={spec!r}: use one of {', '.join(ROLLOUT_RS_LEVELS)}, or upstream's "
                            "divergence options token_k1/k2/k3, seq_sum_k1/k2/k3, seq_mean_k1/k2/k3, seq_max_k2/k3 "
                            "(comma separated to combine).")
        return False
    try:
        parse_rs_thresholds(parse_rs_options(spec), rc.rollout_rs_threshold)
    except (ValueError, TypeError) as err:
        problems.append(f"{RC}: {err}.")
    if rc.rollout_rs_threshold_lower is not None:
        problems.append(f"{RC}.rollout_rs_threshold_lower is for the ratio levels; with rollout_rs={spec} give "
                        "k1 bounds as lower_upper in rollout_rs_threshold (e.g. '0.6_1.6').")
    return True


def rollout_correction_problems(rc: RolloutCorrectionConfig, calculate_log_probs: bool, loss_mode: str) -> list[str]:
    """The checks that need more than one key; every message names the key and what to do."""
    problems = []
    divergence = _divergence_problems(rc, problems)
    for key in ("rollout_is_threshold", "rollout_rs_threshold", "rollout_rs_threshold_lower",
                "rollout_token_veto_threshold"):
        value = getattr(rc, key)
        if key == "rollout_rs_threshold" and divergence:
            continue  # checked per option above
        if isinstance(value, str):  # kept as written (a str-or-float key): a plain number is fine here
            value = _plain_number(value)
            if value is None:
                problems.append(f"{RC}.{key}={getattr(rc, key)!r} must be a number here (lower_upper and lists "
                                "are for rollout_rs divergence options such as token_k1).")
                continue
        if value is not None and not value > 0:
            problems.append(f"{RC}.{key} must be > 0 (a ratio pi_train/pi_rollout), got {value}.")
    if problems:
        return problems
    if rc.enabled and not calculate_log_probs:
        problems.append(f"{RC} is on, and it needs the rollout engine's log-probs: set "
                        "actor_rollout_ref.rollout.calculate_log_probs=true.")
    veto = rc.rollout_token_veto_threshold
    if veto is not None and not veto < 1:
        problems.append(f"{RC}.rollout_token_veto_threshold={veto} would veto ordinary tokens: it rejects a sequence "
                        "holding any token with pi_train/pi_rollout below it; use a small value such as 1e-4.")
    if problems:
        return problems
    if divergence:
        pass
    elif rc.rollout_rs is not None:
        threshold = _plain_number(rc.rollout_rs_threshold)
        upper = rc.rollout_is_threshold if threshold is None else threshold
        lower = 1.0 / upper if rc.rollout_rs_threshold_lower is None else rc.rollout_rs_threshold_lower
        if not lower < upper:
            problems.append(f"{RC}: the rejection bounds need lower < upper, got lower={lower:g} "
                            f"(rollout_rs_threshold_lower, null: 1/upper) and upper={upper:g} (rollout_rs_threshold, "
                            "null: rollout_is_threshold); an upper bound must be > 1 when the lower one is derived.")
    else:
        for key in ("rollout_rs_threshold", "rollout_rs_threshold_lower"):
            if getattr(rc, key) is not None:
                problems.append(f"{RC}.{key} is set but {RC}.rollout_rs is null, so nothing would use it: set "
                                "rollout_rs=token|sequence|geometric (or token_k1, seq_max_k2, ...), or remove it.")
    if rc.rollout_is is None and rc.rollout_is_batch_normalize:
        problems.append(f"{RC}.rollout_is_batch_normalize=true normalises IS weights, but rollout_is is null: set "
                        "rollout_is=token|sequence, or remove it.")
    if rc.rollout_is is None and rc.rollout_is_threshold != 2.0 and (
            rc.rollout_rs is None or rc.rollout_rs_threshold is not None):
        problems.append(f"{RC}.rollout_is_threshold={rc.rollout_is_threshold:g} is set, but neither IS "
                        "(rollout_is is null) nor rejection (rollout_rs, whose null threshold follows it) uses it.")
    if not rc.bypass_mode and rc.loss_type != "ppo_clip":
        problems.append(f"{RC}.loss_type={rc.loss_type} chooses the bypass-mode loss, as upstream: set "
                        f"{RC}.bypass_mode=true, or actor_rollout_ref.actor.policy_loss.loss_mode=reinforce for "
                        "REINFORCE against pi_old.")
    if rc.bypass_mode and rc.loss_type == "ppo_clip" and rc.rollout_is is not None:
        # upstream's bypass loss computes the weights and logs them, but the PPO ratio already is pi_theta/pi_rollout
        warnings.warn(f"{RC}.rollout_is={rc.rollout_is} with bypass_mode=true and loss_type=ppo_clip: the IS weights "
                      "are logged (rollout_corr/rollout_is_*) but not applied, as upstream: the PPO ratio already is "
                      "the importance weight. Use loss_type=reinforce to weight the loss by them.",
                      ConfigWarning, stacklevel=2)
    if rc.bypass_mode and rc.loss_type == "reinforce" and loss_mode not in ("vanilla", "reinforce"):
        problems.append(f"{RC}.loss_type=reinforce replaces the actor's loss, but "
                        f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}; set loss_mode=vanilla, or "
                        "loss_type=ppo_clip to keep that loss against the rollout policy.")
    return problems


@dataclass
class AlgoConfig(BaseConfig):
    gamma: float = 1.0
    lam: float = 1.0
    adv_estimator: str = choice("gae", ADV_ESTIMATORS, adv_estimator_registered)
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = choice("kl", KL_PENALTIES)
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    use_pf_ppo: bool = False
    pf_ppo: PFPPOConfig = field(default_factory=PFPPOConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
