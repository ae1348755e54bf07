"""Build tools from upstream's tool-config YAML.

    tools:
      - class_name: verl.tools.gsm8k_tool.Gsm8kTool
        config: {type: native}            # every other key is handed to the tool
        tool_schema:                      # optional when the class supplies its own schema
          type: function
          function: {name: ..., description: ..., parameters: {type: object, properties: {...}, required: [...]}}

``config.type`` is ``native`` (the default when missing, as in older upstream files) or ``mcp``: an MCP entry has
an ``mcp:`` mapping (``mcp_servers_config_path``, optional ``tool_selected_list``) instead of ``tool_schema`` and
yields one tool per tool its servers serve (verl.utils.mcp.tool_entry). Every error names the file and the entry
(by index and class) that caused it.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema
from verl.utils.import_utils import import_class, load_yaml_list

__all__ = ["ToolType", "get_tool_class", "initialize_tools_from_config", "load_all_tools"]

SUPPORTED_TOOL_TYPES = ("native", "mcp")


class ToolType:
    NATIVE = "native"
    MCP = "mcp"


def _load_yaml(path: str) -> dict[str, Any]:
    return load_yaml_list(path, "tools", "tool config", "multi_turn.tool_config_path", "class_name, config, tool_schema")


def get_tool_class(cls_name: str, where: str = "") -> type:
    """Import ``pkg.module.Class``; ``where`` prefixes errors with the file and entry."""
    return import_class(cls_name, where)


def _tool_class(entry: dict[str, Any], where: str) -> type:
    tool_cls = get_tool_class(entry["class_name"], where)
    if not (isinstance(tool_cls, type) and issubclass(tool_cls, BaseTool)):
        raise TypeError(f"{where}: {entry['class_name']} is not a subclass of verl.tools.base_tool.BaseTool")
    return tool_cls


def _make(tool_cls: type, config: dict[str, Any], schema: OpenAIFunctionToolSchema | None, where: str) -> BaseTool:
    try:
        return tool_cls(config=dict(config), tool_schema=schema)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from exc


def _build_tools(entry: Any, where: str) -> list[BaseTool]:
    """The tools of one entry: one for a native entry, one per served tool for an MCP entry."""
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: each entry must be a mapping with class_name, config, tool_schema; got {entry!r}")
    if not entry.get("class_name"):
        raise ValueError(f"{where}: class_name is missing (e.g. class_name: verl.tools.gsm8k_tool.Gsm8kTool)")
    where = f"{where} ({entry['class_name']})"
    config = entry.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError(f"{where}: config must be a mapping, got {config!r}")
    tool_type = str(config.get("type", ToolType.NATIVE)).lower()
    if tool_type not in SUPPORTED_TOOL_TYPES:
        raise ValueError(f"{where}: config.type {tool_type!r} is unknown; supported: {list(SUPPORTED_TOOL_TYPES)}")
    if tool_type == ToolType.MCP:
        from verl.utils.mcp.tool_entry import mcp_entry_schemas

        tool_cls = _tool_class(entry, where)
        return [_make(tool_cls, config, OpenAIFunctionToolSchema.model_validate(schema), where)
                for schema in mcp_entry_schemas(entry, where)]
    if entry.get("mcp") is not None:
        raise ValueError(f"{where}: an `mcp:` mapping is read only with config.type: mcp; set the type or remove it")
    tool_cls = _tool_class(entry, where)
    schema = None
    if entry.get("tool_schema") is not None:
        try:
            schema = OpenAIFunctionToolSchema.model_validate(entry["tool_schema"])
        except ValidationError as exc:
            raise ValueError(f"{where}: tool_schema is not an OpenAI function schema "
                             f"{{type: function, function: {{name, description, parameters}}}}:\n{exc}") from exc
    return [_make(tool_cls, config, schema, where)]


def initialize_tools_from_config(tools_config_file: str) -> list[BaseTool]:
    """The tools of the entries, in file order (an MCP entry's in its servers' order). Tool names must be
    unique."""
    loaded = _load_yaml(tools_config_file)
    tools: list[BaseTool] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(loaded["tools"]):
        where = f"tool config {tools_config_file!r}, tools[{index}]"
        for tool in _build_tools(entry, where):
            if tool.name in seen:
                raise ValueError(f"{where}: tool name {tool.name!r} is already used by tools[{seen[tool.name]}]; "
                                 "the model calls tools by name, so names must be unique")
            seen[tool.name] = index
            tools.append(tool)
    return tools


def load_all_tools(tool_config_path: str | None, function_tool_path: str | None = None) -> list[BaseTool]:
    """The tool config's tools, then the function tools of ``function_tool_path`` (upstream after v0.7); the names
    of all must be unique."""
    from verl.tools.function_tool import FunctionToolAdapter, load_function_tools_from_path

    tools = initialize_tools_from_config(tool_config_path) if tool_config_path else []
    owners = {tool.name: f"tool config {tool_config_path!r}" for tool in tools}
    for function in (load_function_tools_from_path(function_tool_path) if function_tool_path else []):
        if function.name in owners:
            raise ValueError(f"function tool {function.name!r} of {function_tool_path!r} has the name of a tool of "
                             f"{owners[function.name]}; the model calls tools by name, so rename one")
        owners[function.name] = f"function tool file {function_tool_path!r}"
        tools.append(FunctionToolAdapter(function))
    return tools
