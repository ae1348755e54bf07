"""Upstream's tool-parser API at upstream's path, for agent loops written against it:
``ToolParser.get_tool_parser(name, tokenizer)`` and ``await parser.extract_tool_calls(response_ids)`` ->
``(content, [FunctionCall(name, arguments)])`` with ``arguments`` as JSON text, and ``ToolParser.register(name)``
for a parser of one's own. The registered formats read turns with the parsers ``multi_turn.format`` picks for the
tool agent (verl.workers.rollout.agent_loop.tool_formats); as upstream's, they drop a call they cannot read (the
tool agent instead answers it with an error for the model)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pydantic import BaseModel

from verl.workers.rollout.agent_loop.tool_formats import get_tool_parser as _format_parser

__all__ = ["FunctionCall", "ToolParser", "HermesToolParser", "GptOssToolParser", "Qwen3XMLToolParser",
           "Llama3JsonToolParser"]


class FunctionCall(BaseModel):
    name: str
    arguments: str  # the call's arguments as JSON text


class ToolParser:
    _registry: dict[str, type[ToolParser]] = {}

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    async def extract_tool_calls(self, responses_ids: list[int], tools: list[dict] | None = None
                                 ) -> tuple[str, list[FunctionCall]]:
        raise TypeError(f"{type(self).__name__} must implement extract_tool_calls(responses_ids)")

    @classmethod
    def get_tool_parser(cls, name: str, tokenizer: Any) -> ToolParser:
        if name not in cls._registry:
            raise ValueError(f"Unknown tool parser: {name} (registered: {sorted(cls._registry)})")
        return cls._registry[name](tokenizer)

    @classmethod
    def register(cls, name: str):
        def decorator(subclass: type[ToolParser]) -> type[ToolParser]:
            cls._registry[name] = subclass
            return subclass

        return decorator


class _FormatToolParser(ToolParser):
    """One of multi_turn.format's parsers behind upstream's interface."""

    format_name = "hermes"

    async def extract_tool_calls(self, responses_ids: list[int], tools: list[dict] | None = None
                                 ) -> tuple[str, list[FunctionCall]]:
        parser = _format_parser(self.format_name, tools)
        skip = not parser.keep_special_tokens
        text = await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.tokenizer.decode(responses_ids, skip_special_tokens=skip))
        turn = parser.parse(text)
        calls = [FunctionCall(name=c.name, arguments=json.dumps(c.arguments, ensure_ascii=False)) for c in turn.calls]
        return turn.content, calls


@ToolParser.register("hermes")
class HermesToolParser(_FormatToolParser):
    format_name = "hermes"


@ToolParser.register("gpt-oss")
class GptOssToolParser(_FormatToolParser):
    format_name = "gpt-oss"


@ToolParser.register("qwen3_coder")
class Qwen3XMLToolParser(_FormatToolParser):
    format_name = "qwen3_coder"


@ToolParser.register("llama3_json")
class Llama3JsonToolParser(_FormatToolParser):
    format_name = "llama3_json"
