"""The one conversion from a composed DictConfig to the typed PPOTrainerConfig, for entry points users call."""

from __future__ import annotations

from typing import Any

from verl.trainer.config import PPOTrainerConfig, validate_config


def as_typed(config: Any, check_files: bool = True) -> PPOTrainerConfig:
    """`config` itself when already typed; a DictConfig or dict is validated once here (ConfigError on problems)."""
    if isinstance(config, PPOTrainerConfig):
        return config
    return validate_config(config, check_files=check_files)
