"""Tool-call formats besides hermes, chosen by ``actor_rollout_ref.rollout.multi_turn.format`` (upstream's names):

- ``qwen3_coder``: Qwen3-Coder / Qwen3.5's XML, ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...
  </function></tool_call>``. Values are raw text; each is converted by the type its tool schema declares.
- ``gpt-oss``: OpenAI's harmony messages, ``<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>
  {ARGS}<|call|>``; the analysis channel (reasoning) is dropped first, so a call written while thinking is not run.
- ``llama3_json``: Llama 3.1's JSON calls, ``{"name": ..., "parameters": {...}}`` (optionally after
  ``<|python_tag|>``, several separated by ``;``), the whole turn being the calls.

Every parser returns a ParsedTurn: a call that cannot be read becomes an error the model reads in the tool turn."""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from verl.workers.rollout.agent_loop.tool_parser import FunctionCall, HermesToolParser, ParsedTurn

__all__ = ["Qwen3CoderToolParser", "GptOssToolParser", "Llama3JsonToolParser", "TOOL_PARSERS", "get_tool_parser"]


def _parameter_types(tool_schemas: list[dict]) -> dict[str, dict[str, str]]:
    """{tool name: {parameter: declared JSON-schema type}} from OpenAI-style tool schemas."""
    types: dict[str, dict[str, str]] = {}
    for schema in tool_schemas or []:
        function = schema.get("function", schema)
        properties = (function.get("parameters") or {}).get("properties") or {}
        types[function.get("name", "")] = {k: str((v or {}).get("type", "string")) for k, v in properties.items()}
    return types


def _convert(raw: str, declared: str | None) -> Any:
    """A qwen3_coder parameter's text as the type its schema declares (text stays text when it does not parse)."""
    if raw.strip().lower() == "null":
        return None
    kind = (declared or "").lower()
    if kind in ("string", "str", "text"):
        return raw
    try:
        if kind in ("integer", "int"):
            return int(raw.strip())
        if kind in ("number", "float"):
            value = float(raw.strip())
            return int(value) if value.is_integer() and "." not in raw and "e" not in raw.lower() else value
        if kind in ("boolean", "bool"):
            lowered = raw.strip().lower()
            if lowered in ("true", "false"):
                return lowered == "true"
            return raw
    except ValueError:
        return raw
    # object / array / undeclared: JSON first, then a Python literal (models write both), else the text
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw


def _one_newline_trimmed(value: str) -> str:
    # the template writes each value on its own lines: exactly one wrapping newline is markup, not content
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


class Qwen3CoderToolParser:
    start, end = "<tool_call>", "</tool_call>"
    keep_special_tokens = False
    _block = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    _function = re.compile(r"^\s*<function=([^>\n]+)>(.*?)</function>\s*$", re.DOTALL)
    _parameter = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)

    def __init__(self, tool_schemas: list[dict] | None = None) -> None:
        self.types = _parameter_types(tool_schemas or [])

    def parse(self, text: str) -> ParsedTurn:
        calls: list[FunctionCall] = []
        errors: list[str] = []
        for block in self._block.findall(text):
            match = self._function.match(block)
            if match is None:
                errors.append(f"a tool call must be <function=NAME> with <parameter=KEY>VALUE</parameter> inside, "
                              f"closed by </function>: {block.strip()[:200]}")
                continue
            name = match.group(1).strip()
            declared = self.types.get(name, {})
            arguments = {key.strip(): _convert(_one_newline_trimmed(value), declared.get(key.strip()))
                         for key, value in self._parameter.findall(match.group(2))}
            calls.append(FunctionCall(name, arguments))
        rest = self._block.sub("", text)
        if self.start in rest:
            errors.append(f"a {self.start} block was not closed with {self.end}")
            rest = rest.split(self.start, 1)[0]
        return ParsedTurn(content=rest.strip(), calls=calls, errors=errors)


class GptOssToolParser:
    keep_special_tokens = True  # the harmony markup is made of special tokens
    _analysis = re.compile(r"(?:<\|start\|>assistant)?<\|channel\|>analysis<\|message\|>.*?(?:<\|end\|>|$)", re.DOTALL)
    _call = re.compile(r"(?:<\|start\|>assistant)?<\|channel\|>commentary to=functions\.([^\s<]+)\s*"
                       r"(?:<\|constrain\|>\s*json\s*)?<\|message\|>(.*?)<\|call\|>", re.DOTALL)
    _final = re.compile(r"<\|channel\|>final<\|message\|>(.*?)(?:<\|return\|>|<\|end\|>|$)", re.DOTALL)
    _markup = re.compile(r"<\|start\|>assistant|<\|[a-z_]+\|>")

    def __init__(self, tool_schemas: list[dict] | None = None) -> None:
        del tool_schemas  # the arguments are JSON: no schema needed to read them

    def parse(self, text: str) -> ParsedTurn:
        text = self._analysis.sub("", text)
        calls: list[FunctionCall] = []
        errors: list[str] = []
        for name, body in self._call.findall(text):
            call, error = HermesToolParser._read(json.dumps({"name": name, "arguments": body.strip()}))
            if call is None:
                errors.append(error)
            else:
                calls.append(call)
        rest = self._call.sub("", text)
        if "to=functions." in rest:
            errors.append("a tool call (to=functions.NAME) was not finished with <|call|>")
            rest = rest.split("to=functions.", 1)[0]
        final = self._final.search(rest)  # the answer channel, when the turn has one; else the text without markup
        content = final.group(1) if final else self._markup.sub("", rest)
        return ParsedTurn(content=content.strip(), calls=calls, errors=errors)


class Llama3JsonToolParser:
    keep_special_tokens = False
    _tag = "<|python_tag|>"

    def __init__(self, tool_schemas: list[dict] | None = None) -> None:
        del tool_schemas

    def parse(self, text: str) -> ParsedTurn:
        body = text.strip()
        if body.startswith(self._tag):
            body = body[len(self._tag):].lstrip()
        if not body.startswith("{"):
            return ParsedTurn(content=text.strip())
        calls: list[FunctionCall] = []
        decoder, at = json.JSONDecoder(), 0
        while at < len(body):
            try:
                data, at = decoder.raw_decode(body, at)
            except json.JSONDecodeError as err:
                return ParsedTurn(content="", calls=calls,
                                  errors=[f"the tool call is not valid JSON ({err.msg} at char {err.pos}): "
                                          f"{body[:200]}"])
            if not isinstance(data, dict) or not isinstance(data.get("name"), str):
                return ParsedTurn(content="", calls=calls,
                                  errors=[f'a tool call must be a JSON object with a "name" string: {body[:200]}'])
            arguments = data.get("parameters", data.get("arguments", {}))
            call, error = HermesToolParser._read(json.dumps({"name": data["name"], "arguments": arguments}))
            if call is None:
                return ParsedTurn(content="", calls=calls, errors=[error])
            calls.append(call)
            while at < len(body) and body[at] in " \t\r\n;":
                at += 1
        return ParsedTurn(content="", calls=calls)


TOOL_PARSERS = {"hermes": HermesToolParser, "qwen3_coder": Qwen3CoderToolParser, "gpt-oss": GptOssToolParser,
                "llama3_json": Llama3JsonToolParser}


def get_tool_parser(name: str, tool_schemas: list[dict] | None = None):
    """The parser ``multi_turn.format`` names (ValueError naming the known ones, as upstream's registry)."""
    if name not in TOOL_PARSERS:
        raise ValueError(f"Unknown tool parser: {name}; actor_rollout_ref.rollout.multi_turn.format is one of "
                         f"{sorted(TOOL_PARSERS)}")
    if name == "hermes":
        return HermesToolParser()
    return TOOL_PARSERS[name](tool_schemas)
