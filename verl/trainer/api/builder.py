"""From any of the accepted config forms to the composed DictConfig, and from there to the typed, checked config.

The forms: None (the defaults), a dotted-key list exactly as on the command line, a dict (nested, dotted keys, or
both), or a PPOTrainerConfig. All of them go through the command line's checks (verl.trainer.config), so a
mistake raises the same ConfigError with the same message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from verl.trainer.config import ConfigError, PPOTrainerConfig, load_config, schema_keys, validate_config
from verl.trainer.config.reward_section import typed_reward_section
from verl.utils.config_keys import unknown_key_message

ConfigLike = PPOTrainerConfig | Mapping[str, Any] | Sequence[str] | None


def _flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted keys to leaf values; an empty mapping is a leaf (it sets a free-form section to {})."""
    flat: dict[str, Any] = {}
    for key, value in node.items():
        if not isinstance(key, str):
            raise ConfigError(f"config key {key!r} under {prefix or 'the top level'!r} must be a string")
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _unknown_keys(keys: Sequence[str]) -> list[str]:
    known, free_form = schema_keys(PPOTrainerConfig)
    problems = []
    for key in keys:
        if key in known or any(key.startswith(section + ".") for section in free_form):
            continue
        if any(k.startswith(key + ".") for k in known) or key in free_form:
            continue  # a whole section given as {} or None
        problems.append(unknown_key_message(key, known))
    return problems


def _from_mapping(values: Mapping[str, Any]) -> DictConfig:
    flat = _flatten(values)
    problems = _unknown_keys(list(flat))
    if problems:
        raise ConfigError(problems)
    cfg = load_config([])
    with open_dict(cfg):
        for key, value in flat.items():
            OmegaConf.update(cfg, key, value, merge=False)
    return cfg


def compose(config_or_overrides: ConfigLike = None) -> DictConfig:
    """The composed (not yet checked) config. Unknown keys raise ConfigError with the closest key, as on the CLI."""
    if config_or_overrides is None:
        return load_config([])
    if isinstance(config_or_overrides, PPOTrainerConfig):
        plain = config_or_overrides.to_dict()
        # upstream v0.7's reward section mirrors other keys: only the leaves edited in Python count as written
        plain["reward"] = typed_reward_section(plain["reward"], config_or_overrides.__dict__.get("_reward_as_built"))
        # critic.fsdp is critic.model.fsdp_config in a checked config (verl.trainer.config.critic_fsdp): one copy
        plain.get("critic", {}).pop("fsdp", None)
        return OmegaConf.create(plain)
    if isinstance(config_or_overrides, DictConfig):
        return config_or_overrides.copy()
    if isinstance(config_or_overrides, Mapping):
        return _from_mapping(config_or_overrides)
    if isinstance(config_or_overrides, Sequence) and not isinstance(config_or_overrides, str | bytes):
        if not all(isinstance(item, str) for item in config_or_overrides):
            raise ConfigError("config overrides given as a list must all be 'key=value' strings, as on the command "
                              f"line; got {config_or_overrides!r}")
        return load_config(list(config_or_overrides))
    raise ConfigError(f"config: expected None, a dict, a list of 'key=value' strings or a PPOTrainerConfig; got "
                      f"{type(config_or_overrides).__name__}")


def device_problems(config: PPOTrainerConfig) -> list[str]:
    """trainer.device=cuda is a promise the machine must keep before any worker is started."""
    if config.trainer.device != "cuda":
        return []
    import torch  # only here: a config asking for CUDA has passed every other check

    if torch.cuda.is_available():
        return []
    return ["trainer.device=cuda but no CUDA GPU is visible to this process (torch.cuda.is_available() is "
            "False). Set trainer.device=auto (use a GPU when there is one) or trainer.device=cpu."]


def check(cfg: DictConfig | dict, *, check_files: bool = True) -> PPOTrainerConfig:
    """validate_config plus the device check: every problem in one ConfigError."""
    typed = validate_config(cfg, check_files=check_files)
    problems = device_problems(typed)
    if problems:
        raise ConfigError(problems)
    return typed


def config(config_or_overrides: ConfigLike = None) -> PPOTrainerConfig:
    """The typed PPOTrainerConfig (dataclasses: attributes complete in an IDE), checked like the command line's
    except for file existence: the data files are usually given to `verl.train(train_data=...)` later, and train
    checks everything again, files included. Edit it freely (`cfg.trainer.total_training_steps = 5`) and pass it
    to `verl.train`."""
    return check(compose(config_or_overrides), check_files=False)
