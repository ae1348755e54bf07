"""Upstream's import path for function tools (``from verl.tools.function_tool import function_tool``); the registry
is verl.utils.function_tools. Here: what a function's return value becomes, and the BaseTool the agent loop calls."""

from __future__ import annotations

import json
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.function_tools import (
    FUNCTION_TOOL_REGISTRY,
    FunctionTool,
    function_tool,
    get_function_tool,
    load_function_tools_from_path,
)

__all__ = ["FUNCTION_TOOL_REGISTRY", "FunctionTool", "FunctionToolAdapter", "function_tool", "get_function_tool",
           "load_function_tools_from_path", "normalize_function_tool_return"]


def _response(value: Any) -> ToolResponse:
    if isinstance(value, ToolResponse):
        return value
    if isinstance(value, str):
        return ToolResponse(text=value)
    if isinstance(value, dict):
        return ToolResponse(text=json.dumps(value, ensure_ascii=False))
    return ToolResponse(text=str(value))


def normalize_function_tool_return(ret: Any) -> tuple[ToolResponse, float, dict]:
    """A function's return value as (response, step reward, metrics), as upstream reads it: a ToolResponse, a str,
    a dict (as JSON) or anything else (``str``) is the response; a tuple ``(response[, reward[, metrics]])`` adds
    the step reward and metrics (None: 0.0 / {}). A tuple of another length is the tool's bug and raises."""
    if not isinstance(ret, tuple):
        return _response(ret), 0.0, {}
    if not 1 <= len(ret) <= 3:
        raise TypeError(f"a function tool returned a tuple of length {len(ret)}: {ret!r}; return (response,), "
                        "(response, reward) or (response, reward, metrics)")
    reward = 0.0 if len(ret) < 2 or ret[1] is None else float(ret[1])
    metrics = {} if len(ret) < 3 or ret[2] is None else dict(ret[2])
    return _response(ret[0]), reward, metrics


class FunctionToolAdapter(BaseTool):
    """A registered function as a BaseTool: stateless, each ``execute`` is ``fn(**arguments)``."""

    def __init__(self, tool: FunctionTool, config: dict[str, Any] | None = None):
        self.function = tool
        super().__init__(config or {}, OpenAIFunctionToolSchema.model_validate(tool.tool_schema))

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        return normalize_function_tool_return(await self.function.call(dict(parameters or {})))
