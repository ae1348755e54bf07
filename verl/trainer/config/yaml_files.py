"""The shipped yaml files: where they are, and their keys as dotted paths."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

CONFIG_DIR = Path(__file__).resolve().parent
# ppo_trainer.yaml composes config groups; this is its flat copy (verl.trainer.config.generate writes it)
GENERATED = CONFIG_DIR / "_generated_ppo_trainer.yaml"
TARGET_KEY = "_target_"  # names a section's class; not a key of its own


def flat_yaml(config_name: str = "ppo_trainer") -> Path:
    """The file holding every key of a shipped config in one tree: the generated copy for ppo_trainer."""
    return GENERATED if config_name == "ppo_trainer" else CONFIG_DIR / f"{config_name}.yaml"


def walk_keys(node: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every section and leaf of a plain nested mapping, parents first."""
    for key, value in node.items():
        path = f"{prefix}{key}"
        yield path, value
        if isinstance(value, Mapping):
            yield from walk_keys(value, path + ".")


@functools.cache
def yaml_keys(config_name: str = "ppo_trainer") -> frozenset[str]:
    """Dotted keys a shipped yaml sets, entries of free-form sections included (e.g. ray_kwargs.ray_init.num_cpus)."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(flat_yaml(config_name)), resolve=False)
    return frozenset(key for key, _ in walk_keys(raw) if key.rpartition(".")[2] != TARGET_KEY)
