"""PPO / GRPO training entry point: `python -m verl.trainer.main_ppo key=value ...`.

The config is checked in two places before any worker starts: override keys before Hydra parses them
(so a typo gets a suggestion), and the composed config inside the Hydra main. Nothing heavy (torch,
ray) is imported until the config has passed, so mistakes are reported in about a second.
"""

from __future__ import annotations

import sys
import warnings

import hydra
from omegaconf import DictConfig

from verl.trainer.config import ConfigError, ConfigWarning, precheck_argv, validate_config

CONFIG_ERROR_EXIT = 2


@hydra.main(config_path="config", config_name="ppo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    check(config)
    run_ppo(config)


def check(config: DictConfig) -> None:
    """Validate, printing problems and warnings as plain lines (no traceback); exit 2 on any problem."""
    error: ConfigError | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        try:
            validate_config(config)
        except ConfigError as e:
            error = e
    for warning in caught:
        if issubclass(warning.category, ConfigWarning):
            print(f"Config warning: {warning.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    if error is not None:
        print(f"Invalid config:\n{error}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)


def run_ppo(config: DictConfig) -> None:
    """Start Ray, build the worker groups and train; the config must already be validated."""
    from verl.trainer.ppo.launcher import run_training

    run_training(config)


if __name__ == "__main__":
    precheck_argv(sys.argv[1:])
    main()
