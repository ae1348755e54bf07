"""Reading config values that may come as a DictConfig, a dict or an attribute object."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

__all__ = ["cfg_select"]


def cfg_select(config, key: str, default=None):
    """``config.<dotted key>`` from a DictConfig or dict; ``default`` when absent or null (null = use default)."""
    if isinstance(config, DictConfig):
        value = OmegaConf.select(config, key, default=None)
    else:
        value = config
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
            if value is None:
                break
    return default if value is None else value
