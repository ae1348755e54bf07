"""The `algorithm` section: advantage estimator, discounting, and KL control."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.trainer.config.base import BaseConfig, at_least, choice
from verl.trainer.config.registries import ADV_ESTIMATORS, KL_PENALTIES, adv_estimator_registered

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
