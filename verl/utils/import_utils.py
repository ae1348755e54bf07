"""Loading the YAML lists users name their own classes in (tools, interactions, agent loops), and importing those
classes by dotted path, with errors that name the file and the entry."""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["import_class", "load_yaml_list"]


def import_class(dotted: Any, where: str = "") -> type:
    """``pkg.module.Class`` imported; ``where`` (file and entry) prefixes every error."""
    prefix = f"{where}: " if where else ""
    if not isinstance(dotted, str) or "." not in dotted:
        raise ValueError(f"{prefix}class_name must be a dotted path like pkg.module.Class, got {dotted!r}")
    module_name, _, attr = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"{prefix}cannot import module {module_name!r} of class_name {dotted!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ImportError(f"{prefix}module {module_name!r} has no {attr!r} (class_name {dotted!r})") from None


def load_yaml_list(path: str, list_key: str, what: str, config_key: str, entry_fields: str) -> dict[str, Any]:
    """The YAML file at ``path`` as a dict whose ``list_key`` is a list (``what``: "tool config", ...)."""
    from omegaconf import OmegaConf

    local = os.path.expanduser(str(path))
    if not os.path.isfile(local):
        raise FileNotFoundError(f"{what} {path!r} does not exist ({config_key})")
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(local), resolve=True)
    except Exception as exc:
        raise ValueError(f"{what} {path!r} is not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict) or not isinstance(loaded.get(list_key), list):
        raise ValueError(f"{what} {path!r}: expected a top-level `{list_key}:` list of {{{entry_fields}}} entries")
    return loaded
