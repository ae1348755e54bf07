"""examples/mcp_tools: the calculator MCP server and the tool config that serves it to the model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from verl.tools.utils.tool_registry import initialize_tools_from_config
from verl.utils.import_utils import import_file_as_module

pytest.importorskip("mcp")
ROOT = Path(__file__).resolve().parents[2]
evaluate = import_file_as_module(str(ROOT / "examples" / "mcp_tools" / "calc_mcp_server.py"), "example").evaluate


@pytest.mark.parametrize(("expression", "value"), [("(12 + 3) * 4", 60), ("7 // 2 - -1", 4), ("2 ** 10 % 1000", 24),
                                                   ("1 / 4", 0.25)])
def test_evaluate(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize("expression", ["__import__('os')", "x + 1", "2 ** 1000", "'a' * 3", "True + 1"])
def test_evaluate_refuses_what_is_not_small_arithmetic(expression):
    with pytest.raises(ValueError):
        evaluate(expression)


def test_the_example_tool_config_serves_calculate(monkeypatch, mcp_manager):
    monkeypatch.chdir(ROOT)  # the example's paths are relative to the repository root
    (tool,) = initialize_tools_from_config("examples/mcp_tools/mcp_tool_config.yaml")

    async def run(expression):
        instance, _ = await tool.create()
        response, _, metrics = await tool.execute(instance, {"expression": expression})
        return response.text, metrics["status"]

    assert tool.name == "calculate" and tool.config["rate_limit"] == 100
    assert asyncio.run(run("(12 + 3) * 4")) == ("60", "success")
    text, status = asyncio.run(run("open('x')"))
    assert status == "error" and json.loads(text)["result"].startswith("Tool call failed: ")
