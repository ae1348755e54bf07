"""Upstream verl's older import path for the algorithm section's classes, kept so users' code that imports from it
still runs. It names the very classes in `verl.trainer.config.algorithm` (no copies), so an `isinstance` check holds
whichever path built the object; `AlgorithmConfig` was upstream's name for what is now `AlgoConfig`."""

from verl.trainer.config.algorithm import (
    AlgoConfig,
    FilterGroupsConfig,
    KLControlConfig,
    PFPPOConfig,
    RolloutCorrectionConfig,
)

AlgorithmConfig = AlgoConfig

__all__ = [
    "AlgoConfig",
    "AlgorithmConfig",
    "FilterGroupsConfig",
    "KLControlConfig",
    "PFPPOConfig",
    "RolloutCorrectionConfig",
]
