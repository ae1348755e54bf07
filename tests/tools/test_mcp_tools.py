"""MCP tools (tool-config entries of ``config.type: mcp``) against a real MCP server (tests/tools/mcp_server.py):
started here over stdio, or reached over SSE / streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from verl.data.tool_schemas import tool_schemas
from verl.tools.mcp_base_tool import MCPBaseTool
from verl.tools.mcp_search_tool import MCPSearchTool
from verl.tools.utils.tool_registry import initialize_tools_from_config
from verl.utils.mcp.client_manager import TokenBucket, mcp2openai
from verl.utils.mcp.servers import load_mcp_servers

pytest.importorskip("mcp")

SERVER = str(Path(__file__).with_name("mcp_server.py"))


def servers_file(tmp_path: Path, servers: dict, name: str = "servers.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


def stdio_servers(tmp_path: Path) -> str:
    return servers_file(tmp_path, {"local": {"command": sys.executable, "args": [SERVER]}})


def tool_config(tmp_path: Path, servers: str, selected: list[str] | None = None, config: dict | None = None,
                class_name: str = "verl.tools.mcp_base_tool.MCPBaseTool", **extra) -> str:
    mcp = {"mcp_servers_config_path": servers}
    if selected is not None:
        mcp["tool_selected_list"] = selected
    entry = {"class_name": class_name, "config": {"type": "mcp", **(config or {})}, "mcp": mcp, **extra}
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"tools": [entry]}))
    return str(path)


def call(tool: MCPBaseTool, parameters: dict, instance: str = "i") -> tuple[str, dict]:
    async def run():
        await tool.create(instance)
        response, reward, metrics = await tool.execute(instance, parameters)
        assert reward == 0.0
        return response.text, metrics
    return asyncio.run(run())


# ---- the servers file, read without the SDK


@pytest.mark.parametrize(("text", "message"), [
    (None, "MCP servers file not found"),
    ("{not json", "is not a JSON MCP servers file"),
    ('{"tools": []}', "has no `mcpServers` mapping"),
    ('{"mcpServers": {"a": {"command": "x"}}, "extra": 1}', r"top-level key\(s\) \['extra'\]"),
    ('{"mcpServers": {"a": {"command": "x", "url": "http://h/"}}}', r"mcpServers.a needs exactly one of .* both"),
    ('{"mcpServers": {"a": {"args": ["x"]}}}', r"mcpServers.a needs exactly one of .* neither"),
    ('{"mcpServers": {"a": {"command": "x", "auth_token": "t"}}}', r"mcpServers.a: unknown key\(s\) \['auth_token'\]"),
    ('{"mcpServers": {"a": {"url": "http://h/", "transport": "grpc"}}}', r"mcpServers.a.transport must be one of"),
])
def test_a_bad_servers_file_is_refused_naming_file_and_server(tmp_path, text, message):
    path = tmp_path / "servers.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        load_mcp_servers(str(path), "mcp.mcp_servers_config_path")
    assert str(info.value).startswith("mcp.mcp_servers_config_path") and "servers.json" in str(info.value)


def test_a_url_server_transport_follows_upstream(tmp_path):
    path = servers_file(tmp_path, {
        "plain": {"url": "http://127.0.0.1:9/mcp"},
        "sse_path": {"url": "http://127.0.0.1:9/sse"},
        "token": {"url": "http://127.0.0.1:9/mcp", "auth_token": "s3cret", "headers": {"X-A": "1"}},
        "explicit": {"url": "http://127.0.0.1:9/sse", "transport": "http"},
        "local": {"command": "srv", "args": ["--x", 1], "env": {"K": "V"}, "cwd": "/tmp"}})
    specs = {spec.name: spec for spec in load_mcp_servers(path)}
    assert specs["plain"].transport == "streamable-http" and specs["sse_path"].transport == "sse"
    assert specs["token"].transport == "sse"  # upstream sends a server with a token over SSE
    assert dict(specs["token"].headers) == {"Authorization": "Bearer s3cret", "X-A": "1"}
    assert specs["explicit"].transport == "streamable-http"
    assert (specs["local"].transport, specs["local"].args, dict(specs["local"].env), specs["local"].cwd) == (
        "stdio", ("--x", "1"), {"K": "V"}, "/tmp")


def test_token_bucket_refills_at_the_rate():
    now = [0.0]
    bucket = TokenBucket(2.0, clock=lambda: now[0])
    assert [bucket.acquire() for _ in range(3)] == [True, True, False]  # a burst of `rate`
    assert bucket.wait_time() == pytest.approx(0.5)
    now[0] = 0.25
    assert not bucket.acquire() and bucket.wait_time() == pytest.approx(0.25)
    now[0] = 0.5
    assert bucket.acquire() and not bucket.acquire()
    now[0] = 100.0
    assert [bucket.acquire() for _ in range(3)] == [True, True, False]  # never more than the burst
    slow = TokenBucket(0.5, clock=lambda: now[0])
    assert slow.acquire() and not slow.acquire() and slow.wait_time() == pytest.approx(2.0)
    with pytest.raises(ValueError, match="rate_limit must be a positive"):
        TokenBucket(0)


def test_mcp2openai_keeps_the_input_schema():
    from mcp import types

    tool = types.Tool.model_validate({"name": "find", "description": "Find.", "inputSchema": {
        "type": "object", "properties": {"q": {"type": "string"}}}})
    assert mcp2openai(tool) == {"type": "function", "function": {
        "name": "find", "description": "Find.", "strict": False,
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": []}}}


# ---- a stdio server


def test_an_mcp_entry_yields_the_selected_tools_of_its_server(tmp_path, mcp_manager):
    path = tool_config(tmp_path, stdio_servers(tmp_path), ["shout", "add"], {"rate_limit": 50, "timeout": 5},
                       class_name="verl.tools.mcp_search_tool.MCPSearchTool")
    tools = initialize_tools_from_config(path)
    assert [tool.name for tool in tools] == ["add", "shout"]  # the server's order
    assert all(type(tool) is MCPSearchTool for tool in tools)
    add = tools[0]
    assert add.config["rate_limit"] == 50 and add.timeout == 5.0
    schema = add.get_openai_tool_schema().model_dump(exclude_none=True)["function"]
    assert schema["description"] == "Add two integers." and schema["parameters"]["required"] == ["a", "b"]
    assert mcp_manager.rate_limiters["local"].rate == 50
    text, metrics = call(add, {"a": 12, "b": 13})
    assert text == "25" and metrics == {"query_count": 0, "status": "success", "total_results": 1,
                                        "api_request_error": ""}
    assert call(tools[1], {"text": "quiet"})[0] == "QUIET"
    assert asyncio.run(add.calc_reward("i")) == ["25"]  # upstream's: the answers so far


def test_every_tool_of_the_servers_without_a_selection(tmp_path, mcp_manager):
    tools = initialize_tools_from_config(tool_config(tmp_path, stdio_servers(tmp_path)))
    assert {tool.name for tool in tools} == {"add", "shout", "pid", "fail", "wait_for_file", "exit_server"}


def test_one_server_process_answers_every_call_from_any_event_loop(tmp_path, mcp_manager):
    (pid,) = initialize_tools_from_config(tool_config(tmp_path, stdio_servers(tmp_path), ["pid"]))
    first = call(pid, {}, "a")[0]
    second = call(pid, {}, "b")[0]  # another asyncio.run: another event loop
    assert first.isdigit() and first == second


def test_a_failed_call_is_told_to_the_model(tmp_path, mcp_manager):
    fail, wait = initialize_tools_from_config(
        tool_config(tmp_path, stdio_servers(tmp_path), ["fail", "wait_for_file"], {"timeout": 0.5}))
    text, metrics = call(fail, {})
    assert json.loads(text)["result"].startswith("Tool call failed: ") and metrics["status"] == "error"
    assert metrics["api_request_error"] == json.loads(text)["result"]
    flag = tmp_path / "flag"
    text, metrics = call(wait, {"path": str(flag)})  # the file never appears before the 0.5 s limit
    assert "did not answer within 0.5 s" in json.loads(text)["result"]
    flag.write_text("")  # lets the server's call finish
    assert call(wait, {"path": str(flag)})[0] == "found"


def test_a_lost_server_is_reported_then_started_again(tmp_path, mcp_manager):
    pid, leave = initialize_tools_from_config(
        tool_config(tmp_path, stdio_servers(tmp_path), ["pid", "exit_server"]))
    before = call(pid, {})[0]
    text, metrics = call(leave, {})
    assert "connection lost during the call of 'exit_server'" in json.loads(text)["result"]
    after = call(pid, {})[0]
    assert after.isdigit() and after != before


def test_the_agent_loop_default_timeout_follows_the_tool_timeout(tmp_path, mcp_manager):
    (add,) = initialize_tools_from_config(
        tool_config(tmp_path, stdio_servers(tmp_path), ["add"], {"timeout": 120}))
    assert add.config["tool_call_timeout"] > 120
    (own,) = initialize_tools_from_config(
        tool_config(tmp_path, stdio_servers(tmp_path), ["add"], {"timeout": 120, "tool_call_timeout": 7}))
    assert own.config["tool_call_timeout"] == 7


@pytest.mark.parametrize(("change", "message"), [
    ({"selected": ["add", "nope"]}, r"tool_selected_list names \['nope'\], which no server"),
    ({"tool_schema": {"type": "function"}}, "takes its tools' schemas from its servers; remove tool_schema"),
    ({"config": {"rate_limit": 0}}, "config.rate_limit must be a positive number"),
    ({"config": {"timeout": "soon"}}, "config.timeout must be a positive number"),
])
def test_a_wrong_mcp_entry_is_refused_naming_the_entry(tmp_path, mcp_manager, change, message):
    selected = change.pop("selected", ["add"])
    path = tool_config(tmp_path, stdio_servers(tmp_path), selected, **change)
    with pytest.raises(ValueError, match=message) as info:
        initialize_tools_from_config(path)
    assert "tools.yaml" in str(info.value) and "tools[0]" in str(info.value)


def test_mcp_keys_on_a_native_entry_and_unknown_mcp_keys_are_refused(tmp_path, mcp_manager):
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump({"tools": [{"class_name": "verl.tools.gsm8k_tool.Gsm8kTool",
                                               "config": {"type": "native"}, "mcp": {"mcp_servers_config_path": "x"}}]}))
    with pytest.raises(ValueError, match=r"tools\[0\].*`mcp:` mapping is read only with config.type: mcp"):
        initialize_tools_from_config(str(path))
    bad = tool_config(tmp_path, stdio_servers(tmp_path))
    loaded = yaml.safe_load(Path(bad).read_text())
    loaded["tools"][0]["mcp"]["servers"] = []
    Path(bad).write_text(yaml.safe_dump(loaded))
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['servers'\] under mcp"):
        initialize_tools_from_config(bad)


def test_two_servers_serving_one_name_are_refused(tmp_path, mcp_manager):
    servers = servers_file(tmp_path, {"one": {"command": sys.executable, "args": [SERVER]},
                                      "two": {"command": sys.executable, "args": [SERVER, "stdio"]}})
    with pytest.raises(ValueError, match="tool 'add' is served by both MCP servers 'one' and 'two'"):
        initialize_tools_from_config(tool_config(tmp_path, servers, ["add"]))


def test_the_dataset_reads_the_schemas_the_server_lists(tmp_path, mcp_manager):
    schemas = tool_schemas(tool_config(tmp_path, stdio_servers(tmp_path), ["add"]))
    assert [schema["function"]["name"] for schema in schemas] == ["add"]
    assert schemas[0]["function"]["parameters"]["properties"]["a"]["type"] == "integer"


# ---- servers reached by URL on loopback


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(("transport", "path"), [("sse", "/sse"), ("http", "/mcp")])
def test_a_url_server(tmp_path, mcp_manager, transport, path):
    port = _free_port()
    process = subprocess.Popen([sys.executable, SERVER, transport, str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        # the manager waits (up to connect_timeout_s) for a server that is still starting, as upstream does
        servers = servers_file(tmp_path, {"remote": {"url": f"http://127.0.0.1:{port}{path}"}})
        add, shout = initialize_tools_from_config(tool_config(tmp_path, servers, ["add", "shout"]))
        assert (add.name, shout.name) == ("add", "shout")
        assert call(add, {"a": 2, "b": 40})[0] == "42" and call(shout, {"text": "hi"})[0] == "HI"
    finally:
        process.kill()
        process.wait()
