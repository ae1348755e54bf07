"""tool_agent with an MCP tool: the model's call goes to a real MCP server (tests/tools/mcp_server.py over stdio),
whose answer is the tool turn; the tool schema the prompt shows is the one the server lists."""

from __future__ import annotations

import json
import sys

import pytest

from tests.tools.test_mcp_tools import SERVER
from tests.workers.rollout.agent_loop.test_tool_agent import _config, _run, _segments, _turns, tokenizer  # noqa: F401

pytest.importorskip("mcp")

ADD_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 144}}\n</tool_call>'


def test_a_model_call_is_answered_by_the_mcp_server(tmp_path, tokenizer, mcp_manager):  # noqa: F811
    servers = tmp_path / "servers.json"
    servers.write_text(json.dumps({"mcpServers": {"math": {"command": sys.executable, "args": [SERVER]}}}))
    tools = {"tools": [{"class_name": "verl.tools.mcp_base_tool.MCPBaseTool", "config": {"type": "mcp"},
                        "mcp": {"mcp_servers_config_path": str(servers), "tool_selected_list": ["add"]}}]}
    out, _ = _run(_config(tmp_path, tool_config=tools), tokenizer, _turns([ADD_CALL, "#### 156"]),
                  extra_info={"tools_kwargs": {}})
    runs = _segments(out, tokenizer)
    assert [m for m, _ in runs] == [1, 0, 1]
    assert runs[1][1] == "\n<|im_start|>tool\n<tool_response>\n156\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert out.non_tensor_batch["__tool_calls__"][0] == 1 and out.non_tensor_batch["__tool_errors__"][0] == 0
    prompt = tokenizer.decode(out.batch["prompts"][0][out.batch["attention_mask"][0, :1024].bool()])
    assert '"name": "add"' in prompt and "Add two integers." in prompt
    assert list(mcp_manager.tool_client_mapping) == ["add"]
