"""Setting keys on a composed config and collecting the validation problems, for the config tests."""

from __future__ import annotations

import pytest
from omegaconf import DictConfig, OmegaConf

from verl.trainer.config import ConfigError, validate_config


def set_keys(cfg: DictConfig, **values) -> DictConfig:
    """`set_keys(cfg, data__train_batch_size=8)` sets data.train_batch_size (`__` stands for a dot)."""
    for key, value in values.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, merge=False)
    return cfg


def problems_of(cfg: DictConfig) -> list[str]:
    """The problems validation reports; fails the test when the config is valid."""
    with pytest.raises(ConfigError) as info:
        validate_config(cfg, check_files=False)
    return info.value.problems


def typed_from(*overrides: str):
    """The typed config of the shipped defaults plus ``overrides`` (command-line spellings), without file checks."""
    from verl.trainer.config import load_config

    return validate_config(load_config(list(overrides)), check_files=False)


def refusal_of(*overrides: str) -> str:
    """The whole refusal (all problems) of the defaults plus ``overrides``; fails the test when they are valid."""
    with pytest.raises(ConfigError) as info:
        typed_from(*overrides)
    return str(info.value)
