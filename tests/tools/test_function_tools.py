"""Function tools (upstream's @function_tool, rollout.multi_turn.function_tool_path): the schema inferred from the
type hints and docstring, the return values, loading a file, and the names beside the tool config's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from verl.tools.function_tool import FunctionToolAdapter, normalize_function_tool_return
from verl.tools.schemas import ToolResponse
from verl.tools.utils.tool_registry import load_all_tools
from verl.utils import function_tools

SAMPLE = str(Path(__file__).with_name("function_tools_sample.py"))
CALC = str(Path(__file__).resolve().parents[1] / "workers/rollout/agent_loop/scripted.py")


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    monkeypatch.setattr(function_tools, "FUNCTION_TOOL_REGISTRY", {})
    monkeypatch.setattr(function_tools, "_LOADED", {})


def run(tool, arguments):
    return asyncio.run(tool.execute("i", arguments))


def test_the_schema_comes_from_the_type_hints_and_the_docstring():
    tools = {t.name: t for t in function_tools.load_function_tools_from_path(SAMPLE)}
    assert sorted(tools) == ["add", "grade", "shout_text"]
    add = tools["add"].tool_schema["function"]
    assert add["description"] == "Add two integers."
    assert add["parameters"]["properties"] == {"a": {"type": "integer", "description": "The first integer."},
                                               "b": {"type": "integer", "description": "The second integer."}}
    assert add["parameters"]["required"] == ["a", "b"]
    shout = tools["shout_text"].tool_schema["function"]  # renamed; a parameter with a default is optional
    assert shout["name"] == "shout_text" and shout["parameters"]["required"] == ["text"]
    assert tools["shout_text"].is_async and not tools["add"].is_async
    assert tools["grade"].tool_schema["function"]["description"] == "Grade an answer."  # given, not inferred
    assert function_tools.load_function_tools_from_path(SAMPLE) is function_tools.load_function_tools_from_path(SAMPLE)


def test_calls_and_return_values():
    tools = {t.name: FunctionToolAdapter(t) for t in function_tools.load_function_tools_from_path(SAMPLE)}
    assert run(tools["add"], {"a": 2, "b": 40}) == (ToolResponse(text="42"), 0.0, {})
    assert run(tools["shout_text"], {"text": "hi", "times": 2})[0].text == "HI HI"  # a coroutine is awaited
    assert run(tools["grade"], {"answer": "42"}) == (ToolResponse(text="graded 42"), 1.0, {"graded": 1})
    assert normalize_function_tool_return({"k": 1})[0].text == '{"k": 1}'
    assert normalize_function_tool_return(("x", None, None)) == (ToolResponse(text="x"), 0.0, {})
    with pytest.raises(TypeError, match="tuple of length 4"):
        normalize_function_tool_return((1, 2, 3, 4))


def test_a_function_the_schema_cannot_be_inferred_for_is_refused_naming_it():
    def untyped(a):
        """Do it.

        Args:
            a: something.
        """

    with pytest.raises(ValueError, match=r"@function_tool 'untyped' .*untyped\): its schema cannot be inferred"):
        function_tools.function_tool(untyped)

    def variadic(*args: int) -> int:
        """Sum.

        Args:
            args: numbers.
        """

    with pytest.raises(ValueError, match="variadic parameter"):
        function_tools.function_tool(variadic)


def test_a_name_taken_by_another_function_is_refused():
    function_tools.load_function_tools_from_path(SAMPLE)

    def other(a: int) -> int:
        """Other.

        Args:
            a: a.
        """

    with pytest.raises(ValueError, match="'add' is already registered"):
        function_tools.function_tool("add")(other)


def test_bad_files_are_named(tmp_path):
    key = "actor_rollout_ref.rollout.multi_turn.function_tool_path"
    with pytest.raises(FileNotFoundError, match=f"{key}: function tool file not found"):
        function_tools.load_function_tools_from_path(str(tmp_path / "none.py"))
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    with pytest.raises(ValueError, match="registers no function tool"):
        function_tools.load_function_tools_from_path(str(empty))


def test_function_tools_come_after_the_tool_configs_and_names_stay_unique(tmp_path):
    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - class_name: tests.workers.rollout.agent_loop.scripted.CalcTool\n"
                      "    config: {type: native}\n    tool_schema:\n      type: function\n"
                      "      function: {name: add, description: calc, parameters: {type: object, properties: {}, required: []}}\n")
    with pytest.raises(ValueError, match="function tool 'add' .* has the name of a tool of tool config"):
        load_all_tools(str(config), SAMPLE)
    names = [tool.name for tool in load_all_tools(None, SAMPLE)]
    assert names == ["add", "grade", "shout_text"]


def test_the_dataset_counts_the_function_tools_in_the_prompt_it_measures():
    from types import SimpleNamespace

    from verl.data.tool_schemas import length_template_kwargs

    data = SimpleNamespace(filter_overlong_prompts=True, tool_config_path=None, function_tool_path=SAMPLE,
                           apply_chat_template_kwargs={})
    names = [schema["function"]["name"] for schema in length_template_kwargs(data)["tools"]]
    assert names == ["add", "grade", "shout_text"]
    data.filter_overlong_prompts = False  # as upstream: only the filter renders the tools
    assert length_template_kwargs(data) == {}
