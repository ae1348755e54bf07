"""PPO / GRPO training entry point: `python -m verl.trainer.main_ppo key=value ...`.

The config is checked in two places before any worker starts: override keys before Hydra parses them
(so a typo gets a suggestion), and the composed config inside the Hydra main, which turns it into the typed
PPOTrainerConfig every later stage receives. Nothing heavy (torch, ray) is imported until the config has
passed, so mistakes are reported in about a second. The train and val files are then checked row by row
(verl/data/data_check.py) before Ray starts; their problems are reported the same way, exit status 2.

The run itself goes through the Python API (verl.trainer.api.run_typed, what `verl.train` calls): this module
only turns its exceptions into plain lines and exit status 2.
"""

from __future__ import annotations

import sys
import warnings

import hydra
from omegaconf import DictConfig

from verl.checkpoint.lock import CheckpointDirLocked
from verl.data.data_check import DataCheckError
from verl.trainer.api import builder
from verl.trainer.config import ConfigError, ConfigWarning, PPOTrainerConfig, prepare_argv
from verl.trainer.ppo.resume_guard import ResumeRefused

CONFIG_ERROR_EXIT = 2


@hydra.main(config_path="config", config_name="ppo_trainer", version_base=None)
def main(config: DictConfig) -> None:
    typed = check(config)
    try:
        from verl.trainer.api.training import run_typed

        run_typed(typed)
    except ConfigError as error:  # found after the config check, still before Ray: the reward file's function
        print(f"Invalid config:\n{error}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)
    except DataCheckError as error:  # found by the data check before Ray started: plain lines, no traceback
        print(f"Invalid data:\n{error}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)
    except (ResumeRefused, CheckpointDirLocked) as refused:  # the run folder, checked before Ray: no traceback
        print(f"Refused to start:\n{refused}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)


def check(config: DictConfig) -> PPOTrainerConfig:
    """Validate into the typed config, printing problems and warnings as plain lines (no traceback); exit 2 on
    any problem."""
    error: ConfigError | None = None
    typed: PPOTrainerConfig | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)
        try:
            typed = builder.check(config)
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
    return typed


def run_ppo(config: PPOTrainerConfig | DictConfig) -> dict:
    """Start Ray, build the worker groups and train. A DictConfig is validated first."""
    from verl.trainer.ppo.launcher import run_training

    return run_training(config)


# Upstream builds the dataset and sampler in this module; its names stay importable from here, loaded on first use
# so that the config check above still runs before torch is imported.
_DATA_BUILDERS = ("create_rl_dataset", "create_rl_sampler")


def __getattr__(name: str):
    if name in _DATA_BUILDERS:
        from verl.data import rl_loading

        return getattr(rl_loading, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    sys.argv[1:] = prepare_argv(sys.argv[1:])  # reward.sandbox_fusion.* is reward_model.sandbox_fusion.*
    main()
