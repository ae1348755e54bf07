"""Build interactions from upstream's interaction-config YAML.

    interaction:
      - name: gsm8k                      # rows pick it with extra_info.interaction_kwargs.name
        class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction
        config: {}

Without ``name``, the class name minus a trailing "Interaction", lowercased, is used (Gsm8kInteraction -> gsm8k),
as upstream does. The name is also put into the config the interaction receives. Every error names the file and
the entry.
"""

from __future__ import annotations

from typing import Any

from verl.interactions.base import BaseInteraction
from verl.utils.import_utils import import_class, load_yaml_list

__all__ = ["get_interaction_class", "initialize_interactions_from_config"]


def _load_yaml(path: str) -> dict[str, Any]:
    return load_yaml_list(path, "interaction", "interaction config", "multi_turn.interaction_config_path", "name, class_name, config")


def get_interaction_class(cls_name: str, where: str = "") -> type:
    """Import ``pkg.module.Class``; ``where`` prefixes errors with the file and entry."""
    return import_class(cls_name, where)


def _default_name(cls_name: str) -> str:
    simple = cls_name.rsplit(".", 1)[-1]
    if simple.endswith("Interaction") and simple != "Interaction":
        simple = simple[: -len("Interaction")]
    return simple.lower()


def initialize_interactions_from_config(interaction_config_file: str) -> dict[str, BaseInteraction]:
    """{name: interaction object}, one per entry."""
    loaded = _load_yaml(interaction_config_file)
    interactions: dict[str, BaseInteraction] = {}
    for index, entry in enumerate(loaded["interaction"]):
        where = f"interaction config {interaction_config_file!r}, interaction[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: each entry must be a mapping with name, class_name, config; got {entry!r}")
        cls_name = entry.get("class_name")
        if not cls_name:
            raise ValueError(f"{where}: class_name is missing "
                             "(e.g. class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction)")
        config = entry.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError(f"{where}: config must be a mapping, got {config!r}")
        name = entry.get("name") or _default_name(cls_name)
        if name in interactions:
            raise ValueError(f"{where}: interaction name {name!r} is used twice; rows select interactions by "
                             "extra_info.interaction_kwargs.name, so names must be unique")
        interaction_cls = get_interaction_class(cls_name, where)
        if not (isinstance(interaction_cls, type) and issubclass(interaction_cls, BaseInteraction)):
            raise TypeError(f"{where}: {cls_name} is not a subclass of verl.interactions.base.BaseInteraction")
        interactions[name] = interaction_cls({**config, "name": name})
    return interactions
