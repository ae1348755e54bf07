"""Typed config sections for worker tests, built by the same builder `validate_config` uses (so choices and
minimums are checked), from plain values with dotted override keys (``"model.use_remove_padding": True``)."""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from verl.utils.config_schema import build_config

T = TypeVar("T")


def typed_section(cls: type[T], values: dict[str, Any], **overrides: Any) -> T:
    tree: dict[str, Any] = {}
    for key, value in {**values, **overrides}.items():
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    result = build_config(cls, tree)
    if result.problems:
        raise ValueError(f"bad test config for {cls.__name__}: {result.problems}")
    return result.config


def with_values(config: T, **overrides: Any) -> T:
    """A deep copy of ``config`` with dotted keys set as given, unchecked: for values the builder would refuse,
    to test the runtime's own checks. A dotted key may go into a free-form dict (``engine_kwargs.vllm.x``).
    Frozen fields (verl.base_config.BaseConfig) are set too: the copy is the test's own, built for it."""
    out = copy.deepcopy(config)
    for key, value in overrides.items():
        *parents, leaf = key.split(".")
        node: Any = out
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node, dict) else getattr(node, part)
        if isinstance(node, dict):
            node[leaf] = value
        elif not hasattr(node, leaf):
            raise AttributeError(f"{type(node).__name__} has no key {leaf!r} ({key})")
        else:
            object.__setattr__(node, leaf, value)  # a fresh copy: past the frozen fields of upstream's BaseConfig
    return out
