"""multi_turn.format: the qwen3_coder, gpt-oss and llama3_json tool-call parsers on hand-written turns, and a
qwen3_coder call running a tool through tool_agent on the scripted engine."""

from __future__ import annotations

import pytest

from tests.workers.rollout.agent_loop.scripted import CALC_SCHEMA, CalcTool
from tests.workers.rollout.agent_loop.test_tool_agent import _config, _run, _segments, _turns, tokenizer  # noqa: F401
from verl.workers.rollout.agent_loop.tool_formats import (
    GptOssToolParser,
    Llama3JsonToolParser,
    Qwen3CoderToolParser,
    get_tool_parser,
)
from verl.workers.rollout.agent_loop.tool_parser import HermesToolParser

SCHEMAS = [{"type": "function", "function": {"name": "plot", "parameters": {"type": "object", "properties": {
    "n": {"type": "integer"}, "scale": {"type": "number"}, "log": {"type": "boolean"}, "style": {"type": "object"},
    "title": {"type": "string"}, "points": {"type": "array"}}}}}]

QWEN_CALL = "<tool_call>\n<function=calc>\n<parameter=expression>\n%s\n</parameter>\n</function>\n</tool_call>"


def test_qwen3_coder_reads_each_parameter_as_its_schema_type():
    text = ("Let me plot it.\n<tool_call>\n<function=plot>\n<parameter=n>\n12\n</parameter>\n"
            "<parameter=scale>\n2.5\n</parameter>\n<parameter=log>\nTrue\n</parameter>\n"
            '<parameter=style>\n{"color": "red"}\n</parameter>\n<parameter=title>\n\n two lines\nhere \n\n</parameter>\n'
            "<parameter=points>\n[1, 2]\n</parameter>\n<parameter=extra>\nnull\n</parameter>\n</function>\n</tool_call>")
    turn = Qwen3CoderToolParser(SCHEMAS).parse(text)
    assert turn.errors == [] and turn.content == "Let me plot it."
    [call] = turn.calls
    assert call.name == "plot"
    # exactly one wrapping newline is markup: the title keeps its own blank lines and spaces
    assert call.arguments == {"n": 12, "scale": 2.5, "log": True, "style": {"color": "red"},
                              "title": "\n two lines\nhere \n", "points": [1, 2], "extra": None}


def test_qwen3_coder_keeps_text_that_does_not_fit_its_type_and_names_broken_blocks():
    parser = Qwen3CoderToolParser(SCHEMAS)
    [call] = parser.parse("<tool_call><function=plot><parameter=n>many</parameter></function></tool_call>").calls
    assert call.arguments == {"n": "many"}  # the tool sees what the model wrote and can answer with an error
    bad = parser.parse('<tool_call>{"name": "plot"}</tool_call>')
    assert bad.calls == [] and "must be <function=NAME>" in bad.errors[0]
    open_block = parser.parse("ok <tool_call>\n<function=plot>")
    assert open_block.content == "ok" and "was not closed" in open_block.errors[0]
    assert parser.parse("no call here").calls == []


def test_gpt_oss_ignores_calls_written_while_thinking():
    text = ("<|channel|>analysis<|message|>I could call <|channel|>commentary to=functions.calc <|constrain|>json"
            '<|message|>{"expression": "1+1"}<|call|> but no.<|end|>'
            "<|start|>assistant<|channel|>commentary to=functions.calc <|constrain|>json"
            '<|message|>{"expression": "12*13"}<|call|>')
    turn = GptOssToolParser().parse(text)
    assert [(c.name, c.arguments) for c in turn.calls] == [("calc", {"expression": "12*13"})]
    assert turn.errors == []
    final = GptOssToolParser().parse("<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final"
                                     "<|message|>#### 156<|return|>")
    assert final.calls == [] and final.content == "#### 156"
    broken = GptOssToolParser().parse("<|channel|>commentary to=functions.calc <|constrain|>json<|message|>{oops}"
                                      "<|call|>")
    assert broken.calls == [] and "not valid JSON" in broken.errors[0]


def test_llama3_json_reads_one_or_several_calls():
    turn = Llama3JsonToolParser().parse('<|python_tag|>{"name": "calc", "parameters": {"expression": "2+2"}}; '
                                        '{"name": "calc", "arguments": {"expression": "3*3"}}')
    assert [c.arguments["expression"] for c in turn.calls] == ["2+2", "3*3"] and turn.errors == []
    assert Llama3JsonToolParser().parse("The answer is 4.").content == "The answer is 4."
    broken = Llama3JsonToolParser().parse('{"name": "calc", "parameters": ')
    assert broken.calls == [] and "not valid JSON" in broken.errors[0]


def test_the_format_key_picks_the_parser():
    assert isinstance(get_tool_parser("hermes"), HermesToolParser)
    assert isinstance(get_tool_parser("qwen3_coder", SCHEMAS), Qwen3CoderToolParser)
    assert get_tool_parser("gpt-oss").keep_special_tokens and not get_tool_parser("hermes").keep_special_tokens
    with pytest.raises(ValueError, match="Unknown tool parser: qwen"):
        get_tool_parser("qwen")


def test_a_qwen3_coder_call_runs_the_tool(tmp_path, tokenizer):  # noqa: F811
    CalcTool.created, CalcTool.released = [], []
    config = _config(tmp_path, **{"rollout.multi_turn.format": "qwen3_coder"})
    out, _ = _run(config, tokenizer, _turns([QWEN_CALL % "12*13", "#### 156"]))
    runs = _segments(out, tokenizer)
    assert [m for m, _ in runs] == [1, 0, 1]
    assert "<tool_response>\n156\n</tool_response>" in runs[1][1]
    assert out.non_tensor_batch["__tool_calls__"][0] == 1 and out.non_tensor_batch["__tool_errors__"][0] == 0
    # the same turn read as hermes is a broken JSON call: the model is told so, and calc never runs
    hermes, _ = _run(_config(tmp_path), tokenizer, _turns([QWEN_CALL % "12*13", "#### 156"]))
    assert "not valid JSON" in _segments(hermes, tokenizer)[1][1]
    assert hermes.non_tensor_batch["__tool_errors__"][0] == 1


def test_upstreams_tool_parser_api_reads_the_same_calls(tokenizer):  # noqa: F811
    """verl.experimental.agent_loop.tool_parser: upstream's interface (token ids in, JSON-text arguments out)."""
    import asyncio
    import json

    from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser

    ids = tokenizer.encode("Thinking. " + QWEN_CALL % "12*13", add_special_tokens=False)
    parser = ToolParser.get_tool_parser("qwen3_coder", tokenizer)
    content, calls = asyncio.run(parser.extract_tool_calls(ids, tools=[CALC_SCHEMA]))
    assert content == "Thinking." and calls == [FunctionCall(name="calc", arguments='{"expression": "12*13"}')]
    hermes = ToolParser.get_tool_parser("hermes", tokenizer)
    text = '<tool_call>\n{"name": "calc", "arguments": {"expression": "1+1"}}\n</tool_call><tool_call>{oops}</tool_call>'
    _, calls = asyncio.run(hermes.extract_tool_calls(tokenizer.encode(text, add_special_tokens=False)))
    assert [json.loads(c.arguments) for c in calls] == [{"expression": "1+1"}]  # the broken call is dropped
    with pytest.raises(ValueError, match="Unknown tool parser: nope"):
        ToolParser.get_tool_parser("nope", tokenizer)

    @ToolParser.register("shout")
    class Shout(ToolParser):
        async def extract_tool_calls(self, responses_ids, tools=None):
            return "", [FunctionCall(name="shout", arguments="{}")]

    try:
        assert isinstance(ToolParser.get_tool_parser("shout", tokenizer), Shout)
    finally:
        ToolParser._registry.pop("shout")
