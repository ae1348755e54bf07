"""Reading tool calls out of a model turn, in the hermes format: ``<tool_call>{"name": ..., "arguments": {...}}
</tool_call>``, one block per call. A block that cannot be used becomes an error for the model to read."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FunctionCall", "ParsedTurn", "HermesToolParser"]

_BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass
class FunctionCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class ParsedTurn:
    content: str  # the turn's text without the tool-call blocks
    calls: list[FunctionCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # one message per block that could not be read


class HermesToolParser:
    start, end = "<tool_call>", "</tool_call>"
    keep_special_tokens = False

    def parse(self, text: str) -> ParsedTurn:
        calls: list[FunctionCall] = []
        errors: list[str] = []
        for block in _BLOCK.findall(text):
            call, error = self._read(block.strip())
            if call is not None:
                calls.append(call)
            else:
                errors.append(error)
        rest = _BLOCK.sub("", text)
        if self.start in rest:  # opened and never closed: the model meant to call something
            errors.append(f"a {self.start} block was not closed with {self.end}")
            rest = rest.split(self.start, 1)[0]
        return ParsedTurn(content=rest.strip(), calls=calls, errors=errors)

    @staticmethod
    def _read(block: str) -> tuple[FunctionCall | None, str]:
        try:
            data = json.loads(block)
        except json.JSONDecodeError as err:
            return None, f"the tool call is not valid JSON ({err.msg} at char {err.pos}): {block[:200]}"
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return None, f'a tool call must be a JSON object with a "name" string: {block[:200]}'
        arguments = data.get("arguments", {})
        if isinstance(arguments, str):  # some models write the arguments as a JSON string
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as err:
                return None, f'the "arguments" of {data["name"]} are not valid JSON ({err.msg})'
        if not isinstance(arguments, dict):
            return None, f'the "arguments" of {data["name"]} must be a JSON object'
        return FunctionCall(data["name"], arguments), ""
