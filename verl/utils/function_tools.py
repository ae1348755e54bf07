"""Function tools (upstream's ``@function_tool``): plain Python functions registered as tools the model can call.

    from verl.tools.function_tool import function_tool

    @function_tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        \"\"\"
        return a + b

``actor_rollout_ref.rollout.multi_turn.function_tool_path`` names the Python file holding such functions; the agent
loop offers every function it registers beside the tool config's tools. The schema the model sees is inferred by
``transformers.utils.get_json_schema`` from the type hints and the Google-style docstring (a summary and an
``Args:`` entry per parameter), so a function that lacks one is refused when its file is loaded, naming it.
``@function_tool("other_name")`` renames the tool; ``schema=`` gives the OpenAI function schema instead of
inferring it. A function is stateless: each call is ``fn(**arguments)`` (a coroutine function is awaited, a plain
one runs in a thread).

The registry lives here (below verl.tools and verl.data) so the dataset can read a file's schemas for its
overlong-prompt filter; verl.tools.function_tool is upstream's import path.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from verl.utils.import_utils import import_file_as_module, module_name_for

__all__ = ["FUNCTION_TOOL_REGISTRY", "FunctionTool", "function_tool", "get_function_tool",
           "load_function_tools_from_path"]

logger = logging.getLogger(__name__)


@dataclass
class FunctionTool:
    """One registered function: ``name`` (the tool's name), ``fn``, ``tool_schema`` (the OpenAI function schema,
    as a dict) and whether ``fn`` is a coroutine function."""

    name: str
    fn: Callable[..., Any]
    tool_schema: dict[str, Any]
    is_async: bool = False

    async def call(self, parameters: dict[str, Any]) -> Any:
        import asyncio

        if self.is_async:
            return await self.fn(**parameters)
        return await asyncio.to_thread(self.fn, **parameters)


FUNCTION_TOOL_REGISTRY: dict[str, FunctionTool] = {}
_LOADED: dict[str, list[FunctionTool]] = {}
_PREFIX = "verl_function_tools_"


def _where(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _inferred_schema(fn: Callable, name: str) -> dict[str, Any]:
    variadic = [p.name for p in inspect.signature(fn).parameters.values()
                if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if variadic:
        raise ValueError(f"@function_tool {name!r} ({_where(fn)}) has variadic parameter(s) {variadic}, which an "
                         "OpenAI tool schema cannot describe; give it named parameters")
    from transformers.utils import get_json_schema

    try:
        schema = get_json_schema(fn)
    except Exception as exc:  # noqa: BLE001 - transformers' parsing errors, re-raised naming the function
        raise ValueError(f"@function_tool {name!r} ({_where(fn)}): its schema cannot be inferred ({exc}). Give every "
                         "parameter a type hint and the docstring a summary and an `Args:` entry per parameter, or "
                         "pass schema= to the decorator") from exc
    schema["function"]["name"] = name
    return schema


def function_tool(name: str | Callable | None = None, *, schema: Any = None):
    """Register a function as a tool: ``@function_tool``, ``@function_tool("name")`` or ``@function_tool(schema=...)``
    (a dict or a pydantic OpenAIFunctionToolSchema). Returns the function unchanged."""

    def register(fn: Callable, tool_name: str | None) -> Callable:
        tool_name = tool_name or fn.__name__
        if schema is None:
            built = _inferred_schema(fn, tool_name)
        else:
            built = schema.model_dump(exclude_none=True) if hasattr(schema, "model_dump") else dict(schema)
        existing = FUNCTION_TOOL_REGISTRY.get(tool_name)
        if existing is not None and existing.fn is not fn:
            raise ValueError(f"function tool {tool_name!r} is already registered by {_where(existing.fn)}; "
                             f"{_where(fn)} cannot take its name (rename one: @function_tool(\"other\"))")
        FUNCTION_TOOL_REGISTRY[tool_name] = FunctionTool(tool_name, fn, built, inspect.iscoroutinefunction(fn))
        return fn

    if callable(name) and schema is None:
        return register(name, None)
    return lambda fn: register(fn, name)


def get_function_tool(name: str) -> FunctionTool:
    try:
        return FUNCTION_TOOL_REGISTRY[name]
    except KeyError:
        raise KeyError(f"function tool {name!r} is not registered; is its file the rollout's "
                       "multi_turn.function_tool_path?") from None


def load_function_tools_from_path(path: str, key: str = "actor_rollout_ref.rollout.multi_turn.function_tool_path"
                                  ) -> list[FunctionTool]:
    """Import the file at ``path`` (once per process) and return the function tools it registered, by name."""
    full = os.path.abspath(os.path.expanduser(str(path)))
    if not os.path.isfile(full):
        raise FileNotFoundError(f"{key}: function tool file not found: {path!r}")
    if full in _LOADED:
        return _LOADED[full]
    before = set(FUNCTION_TOOL_REGISTRY)
    # run the file now even if an earlier load left it in sys.modules: its decorators register into this registry
    sys.modules.pop(module_name_for(full, _PREFIX), None)
    try:
        import_file_as_module(full, _PREFIX)
    except (ValueError, ImportError, SyntaxError) as exc:
        raise type(exc)(f"{key}={path!r}: {exc}") from exc
    names = sorted(set(FUNCTION_TOOL_REGISTRY) - before)
    if not names:
        raise ValueError(f"{key}={path!r} registers no function tool: decorate its tool functions with "
                         "@function_tool (from verl.tools.function_tool import function_tool)")
    _LOADED[full] = [FUNCTION_TOOL_REGISTRY[name] for name in names]
    return _LOADED[full]
