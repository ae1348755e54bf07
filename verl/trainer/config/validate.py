"""The one call that checks a whole trainer config: `validate_config(cfg)`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from verl.trainer.config.aliases import rewrite_aliases
from verl.trainer.config.checks import run_checks
from verl.trainer.config.critic_fsdp import fold_critic_fsdp, share_critic_engine
from verl.trainer.config.deprecated import (
    apply_deprecated_keys,
    fold_both_update_sizes,
    fold_legacy_worker_bool,
    fold_profile_steps,
)
from verl.trainer.config.files import check_files as file_problems
from verl.trainer.config.overrides import unknown_override_problems
from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.trainer.config.reward_section import fold_reward_section
from verl.trainer.config.upstream_keys import adopt_adapter_rank, apply_upstream_keys
from verl.trainer.config.yaml_files import CONFIG_DIR
from verl.utils.config_errors import ConfigError
from verl.utils.config_schema import build_config


def validate_config(cfg: DictConfig | dict, *, check_files: bool = True) -> PPOTrainerConfig:
    """Check every key of a composed ppo_trainer config and return it typed.

    Raises ConfigError listing every problem, each with its full dotted key. Keys given as a bare
    string where a list is declared (trainer.logger=console) are turned into one-element lists, in the
    returned dataclasses and in `cfg` itself, so code reading either sees a list. `check_files=False`
    skips the existence checks of data files and model folders (for tests and dry runs).
    """
    # A plain dict is read through OmegaConf so its ${...} interpolations resolve as they would from yaml.
    node = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(cfg)
    adapter_writes, adapter_problems = adopt_adapter_rank(node)  # before typing: the model section is frozen then
    adapter_writes.update(fold_both_update_sizes(node))  # before typing: the classes refuse both sizes
    adapter_writes.update(fold_profile_steps(node))  # before typing: the roles' tool follows the global one
    adapter_writes.update(fold_legacy_worker_bool(node))  # before typing: the key is a word
    reward_writes, reward_problems = fold_reward_section(node)  # before typing: v0.7's reward: section is ours
    adapter_writes.update(reward_writes)
    adapter_problems += reward_problems
    critic_writes, critic_problems = fold_critic_fsdp(node)  # before typing: two places of the critic's engine
    adapter_writes.update(critic_writes)
    adapter_problems += critic_problems
    result = build_config(PPOTrainerConfig, node)
    if result.problems or adapter_problems:
        raise ConfigError(result.problems + adapter_problems)
    typed: PPOTrainerConfig = result.config
    share_critic_engine(typed)
    # what the reward mirrors read when checked: a later Python edit of one is told apart from a stale mirror
    typed.__dict__["_reward_as_built"] = typed.reward.to_dict()
    writes, problems = apply_deprecated_keys(typed)  # before the checks: they see the per-GPU sizes
    writes.update(adapter_writes)
    upstream_writes, upstream_problems = apply_upstream_keys(typed)
    writes.update(upstream_writes)
    problems += upstream_problems
    problems += run_checks(typed)
    if check_files:
        problems += file_problems(typed)
    if problems:
        raise ConfigError(problems)
    _write_back(cfg, {**result.normalised, **writes})
    return typed


def _write_back(cfg: DictConfig | dict, normalised: dict[str, Any]) -> None:
    for key, value in normalised.items():
        if isinstance(cfg, DictConfig):
            with read_write(cfg), open_dict(cfg):
                OmegaConf.update(cfg, key, value, merge=False)
        else:
            node = cfg
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value


def load_config(overrides: Sequence[str] = (), config_name: str = "ppo_trainer") -> DictConfig:
    """Compose a config from this folder with Hydra, as the command line would (without running anything).

    Unknown override keys raise ConfigError with a suggestion, like the command line. Must not be called
    inside a running @hydra.main (Hydra allows one global initialisation).
    """
    from hydra import compose, initialize_config_dir

    overrides = rewrite_aliases(overrides)
    problems = unknown_override_problems(overrides)
    if problems:
        raise ConfigError(problems)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name=config_name, overrides=list(overrides))
