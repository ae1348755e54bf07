"""Upstream's older module `verl.trainer.config.algorithm_config` must hand back our classes themselves."""

from verl.trainer.config import algorithm as current
from verl.trainer.config import algorithm_config as legacy
from verl.utils.config import omega_conf_to_dataclass


def test_alias_names_the_same_classes():
    assert legacy.AlgorithmConfig is current.AlgoConfig
    assert legacy.AlgoConfig is current.AlgoConfig
    assert legacy.KLControlConfig is current.KLControlConfig
    assert legacy.PFPPOConfig is current.PFPPOConfig


def test_alias_builds_from_a_dict_config():
    from omegaconf import OmegaConf

    cfg = OmegaConf.create(
        {"_target_": "verl.trainer.config.algorithm_config.AlgorithmConfig", "gamma": 0.9, "adv_estimator": "grpo"}
    )
    algo = omega_conf_to_dataclass(cfg)
    assert isinstance(algo, current.AlgoConfig)
    assert algo.gamma == 0.9 and algo.adv_estimator == "grpo"
