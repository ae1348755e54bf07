"""Upstream's helpers for typed config: ``omega_conf_to_dataclass`` and ``update_dict_with_config``.

    from verl.utils.config import omega_conf_to_dataclass
    actor_cfg = omega_conf_to_dataclass(config.actor_rollout_ref.actor)            # the class its _target_ names
    optim_cfg = omega_conf_to_dataclass(config.critic.optim, FSDPOptimizerConfig)  # or the class given

Both go through the same checked builder as the trainer's pre-Ray check (verl.utils.config_schema): unknown keys,
wrong types and refused values raise ConfigError, each message naming the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

from omegaconf import DictConfig, OmegaConf

from verl.utils.config_errors import ConfigError
from verl.utils.config_schema import TARGET_KEY, build_config, import_target

__all__ = ["omega_conf_to_dataclass", "update_dict_with_config"]

T = TypeVar("T")


def omega_conf_to_dataclass(config: DictConfig | Mapping[str, Any], dataclass_type: type[T] | None = None, *,
                            key: str = "") -> T:
    """Build `dataclass_type` (or, when None, the dataclass the section's ``_target_`` names) from a section.

    Keys the section leaves out take the dataclass's defaults. `key` is the section's dotted name, used in the
    messages (``actor_rollout_ref.actor.clip_ratio must be a number ...``). A section that already is a
    dataclass instance is returned as it is.
    """
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return config  # type: ignore[return-value]
    node = config if isinstance(config, DictConfig) else OmegaConf.create(dict(config))
    if dataclass_type is None:
        dataclass_type = _target_class(node, key)
    if not (isinstance(dataclass_type, type) and dataclasses.is_dataclass(dataclass_type)):
        raise ValueError(f"{dataclass_type!r} must be a dataclass")
    result = build_config(dataclass_type, node, root=key)
    if result.problems:
        raise ConfigError(result.problems)
    return result.config


def _target_class(node: DictConfig, key: str) -> type:
    where = f"{key}.{TARGET_KEY}" if key else TARGET_KEY
    target = node.get(TARGET_KEY)
    if not isinstance(target, str) or not target:
        raise ConfigError(f"{where} is not set: name the config class (e.g. verl.workers.config.FSDPActorConfig), "
                          "or pass dataclass_type.")
    found = import_target(target)
    if not (isinstance(found, type) and dataclasses.is_dataclass(found)):
        raise ConfigError(f"{where}={target!r} is not an importable dataclass.")
    return found


def update_dict_with_config(dictionary: dict, config: Any) -> None:
    """Overwrite each entry of `dictionary` whose key `config` also has (attribute access), as upstream."""
    for name in dictionary:
        if hasattr(config, name):
            dictionary[name] = getattr(config, name)
