"""Helpers for starting vLLM from verl's config, at upstream's path ``verl.workers.rollout.vllm_rollout.utils``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["build_cli_args_from_config"]


def build_cli_args_from_config(config: Mapping[str, Any]) -> list[str]:
    """vLLM server command-line arguments from a dict of engine settings, keys used as written (``--{key}``).

    None and False are left out (the flag's default applies); True is a bare ``--key``; a list is ``--key`` followed
    by its items (an empty list is left out: vLLM's list options need at least one value); a dict is one JSON
    argument; anything else is its ``str``.
    """
    args: list[str] = []
    for key, value in config.items():
        if value is None or value is False or (isinstance(value, list) and not value):
            continue
        args.append(f"--{key}")
        if value is True:
            continue
        if isinstance(value, list):
            args.extend(str(item) for item in value)
        elif isinstance(value, dict):
            args.append(json.dumps(value))
        else:
            args.append(str(value))
    return args
