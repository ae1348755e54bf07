"""Agent loops by name: the built-ins register themselves, users add theirs with ``@register`` or a YAML file.

``rollout.agent.agent_loop_config_path`` is a YAML list, upstream's format::

    - name: my_agent
      _target_: my_pkg.loops.MyAgentLoop
      max_steps: 4          # any further keys are passed to the loop's constructor
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["register", "registered_agent_loops", "load_agent_loop_config", "resolve_agent_loop"]

_REGISTRY: dict[str, dict[str, Any]] = {}


def register(agent_name: str):
    """Class decorator: make the loop selectable as ``agent_name`` (the dataset's agent_name column)."""

    def decorator(cls):
        target = f"{cls.__module__}.{cls.__qualname__}"
        existing = _REGISTRY.get(agent_name)
        if existing is not None and existing["_target_"] != target:
            raise ValueError(f"agent loop {agent_name!r} is already registered to {existing['_target_']}")
        _REGISTRY[agent_name] = {"_target_": target}
        return cls

    return decorator


def registered_agent_loops() -> dict[str, dict[str, Any]]:
    """The loops registered so far (the built-ins once the manager has imported them)."""
    return {name: dict(entry) for name, entry in _REGISTRY.items()}


def load_agent_loop_config(path: str | None) -> dict[str, dict[str, Any]]:
    """Every loop by name: the registered ones, then the YAML's entries (which win on the same name)."""
    loops = registered_agent_loops()
    if not path:
        return loops
    import yaml

    key = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
    with open(path, encoding="utf-8") as f:
        entries = yaml.safe_load(f)
    if not isinstance(entries, list):
        raise ValueError(f"{key}={path}: expected a YAML list of '- name: ...' / '_target_: pkg.Class' entries")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("_target_"):
            raise ValueError(f"{key}={path}: entry {i} needs 'name' and '_target_' (got {entry!r})")
        loops[str(entry["name"])] = {k: v for k, v in entry.items() if k != "name"}
    return loops


def resolve_agent_loop(name: str, loops: dict[str, dict[str, Any]]) -> tuple[type, dict[str, Any]]:
    """(class, extra constructor kwargs) for a loop name; an unknown name lists the known ones."""
    if name not in loops:
        raise KeyError(f"agent loop {name!r} (a row's agent_name, or rollout.agent.default_agent_loop) is not "
                       f"registered; known: {', '.join(sorted(loops))}. Register it with "
                       "@verl.experimental.agent_loop.register or list it in "
                       "actor_rollout_ref.rollout.agent.agent_loop_config_path")
    entry = dict(loops[name])
    target = entry.pop("_target_")
    module_name, _, class_name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as err:
        raise ImportError(f"agent loop {name!r}: cannot import {target!r} ({err})") from err
    from verl.workers.rollout.agent_loop.base import AgentLoopBase

    if not (isinstance(cls, type) and issubclass(cls, AgentLoopBase)):
        raise TypeError(f"agent loop {name!r}: {target} is not a subclass of AgentLoopBase")
    return cls, entry
