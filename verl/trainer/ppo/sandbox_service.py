"""The run's own sandbox: started when a sandbox tool or a code-execution reward is configured without a url.

- A tool-config entry naming SandboxFusionTool with an empty ``sandbox_fusion_url``: the tool reads the url from
  ``VERL_SANDBOX_FUSION_URL``, exported here before Ray starts so every worker inherits it.
- Train or validation rows of a code-contest data source (scored by running their tests) with
  ``reward_model.sandbox_fusion.url`` (``reward.sandbox_fusion.url``) unset: the url is filled in.

The service (``python -m verl.tools.sandbox``, loopback only) is stopped when the run ends, however it ends.
"""

from __future__ import annotations

import os
from typing import Any

from verl.rewards import CODE_DATA_SOURCES
from verl.tools.sandbox_fusion_tools import LOCAL_SANDBOX_ENV

__all__ = ["sandbox_needs", "start_run_sandbox"]


def _tools_without_url(tool_config_path: str | None) -> list[str]:
    if not tool_config_path:
        return []
    import yaml

    with open(os.path.expanduser(tool_config_path), encoding="utf-8") as f:
        entries = (yaml.safe_load(f) or {}).get("tools") or []
    names = []
    for entry in entries:
        cls = str(entry.get("class_name", ""))
        config = entry.get("config") or {}
        if cls.rsplit(".", 1)[-1] == "SandboxFusionTool" and not config.get("sandbox_fusion_url"):
            names.append(((entry.get("tool_schema") or {}).get("function") or {}).get("name", cls))
    return names


def _code_sources(files: list[str] | None, key: str) -> set[str]:
    import pyarrow.parquet as pq

    found: set[str] = set()
    for path in files or []:
        path = os.path.expanduser(path)
        if "://" in path or not os.path.exists(path) or key not in pq.read_schema(path).names:
            continue
        column = pq.read_table(path, columns=[key]).column(key).to_pylist()
        found |= {str(v) for v in set(column)} & set(CODE_DATA_SOURCES)
    return found


def sandbox_needs(config: Any, custom_reward: bool = False) -> tuple[list[str], set[str]]:
    """(tools that need the run's sandbox, code data sources whose reward needs it) for the typed config."""
    rollout = config.actor_rollout_ref.rollout
    tools = _tools_without_url(rollout.multi_turn.tool_config_path) if rollout.multi_turn.enable else []
    sources: set[str] = set()
    if not config.reward_model.sandbox_fusion.url and not config.custom_reward_function.path and not custom_reward:
        key = config.data.reward_fn_key
        sources = _code_sources(config.data.train_files, key) | _code_sources(config.data.val_files, key)
    return tools, sources


def start_run_sandbox(config: Any, custom_reward: bool = False):
    """The started LocalSandbox (stop it at the end), or None when the run needs none."""
    tools, sources = sandbox_needs(config, custom_reward)
    if not tools and not sources:
        return None
    from verl.sandbox.local import LocalSandbox

    sandbox = LocalSandbox()
    url = sandbox.start()
    if tools:
        os.environ[LOCAL_SANDBOX_ENV] = url
    if sources:
        config.reward_model.sandbox_fusion.url = url
    users = [f"tool {t}" for t in tools] + [f"the reward of data_source {s}" for s in sorted(sources)]
    print(f"[sandbox] started the local sandbox at {url} for {', '.join(users)}")
    return sandbox
