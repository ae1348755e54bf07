"""``data.tool_config_path`` (upstream v0.7; follows ``actor_rollout_ref.rollout.multi_turn.tool_config_path``): the
tools' OpenAI function schemas, read from the tool config file, for the chat template the dataset's overlong-prompt
filter renders (``tools=...``), so a prompt is measured with the tool list the tool agent loop puts in front of it.

Only the schemas are read here (each entry's ``tool_schema``, exactly as written; for an entry of ``config.type:
mcp``, the schemas its MCP servers list, as the agent loop will show them): the tools themselves are built by the
agent loop (verl.tools.utils.tool_registry), which checks their classes.
"""

from __future__ import annotations

from typing import Any

from verl.utils.import_utils import load_yaml_list
from verl.utils.mcp.tool_entry import mcp_entry_schemas

__all__ = ["function_tool_schemas", "tool_schemas", "length_template_kwargs"]


def tool_schemas(path: str | None) -> list[dict[str, Any]] | None:
    """The ``tool_schema`` of every entry of the tool config at ``path``; None without a path."""
    if not path:
        return None
    loaded = load_yaml_list(path, "tools", "tool config", "data.tool_config_path", "class_name, config, tool_schema")
    schemas = []
    for i, entry in enumerate(loaded["tools"]):
        if isinstance(entry, dict) and str((entry.get("config") or {}).get("type", "native")).lower() == "mcp":
            schemas += mcp_entry_schemas(entry, f"tool config {path!r} entry {i} (data.tool_config_path)")
            continue
        schema = entry.get("tool_schema") if isinstance(entry, dict) else None
        if not isinstance(schema, dict):
            raise ValueError(f"tool config {path!r} entry {i}: no `tool_schema` mapping (data.tool_config_path)")
        schemas.append(schema)
    return schemas


def function_tool_schemas(path: str | None) -> list[dict[str, Any]]:
    """The schemas of the @function_tool functions of the file at ``path`` (data.function_tool_path)."""
    if not path:
        return []
    from verl.utils.function_tools import load_function_tools_from_path

    return [tool.tool_schema for tool in load_function_tools_from_path(path, "data.function_tool_path")]


def length_template_kwargs(data: Any) -> dict[str, Any]:
    """The chat-template variables prompts are measured with (``data``: the typed data section): the user's
    ``apply_chat_template_kwargs``, plus ``tools`` when ``data.filter_overlong_prompts`` drops rows (the dataset's
    filter counts the tools; the items' prompts and the truncation check do not)."""
    kwargs = dict(getattr(data, "apply_chat_template_kwargs", None) or {})
    schemas = None
    if getattr(data, "filter_overlong_prompts", False):
        schemas = ((tool_schemas(getattr(data, "tool_config_path", None)) or [])
                   + function_tool_schemas(getattr(data, "function_tool_path", None)))
    return {**kwargs, "tools": schemas} if schemas else kwargs
