"""A small MCP server for the MCP-tool tests: ``python mcp_server.py [stdio | sse PORT | http PORT]``.

Tools: ``add`` (integer sum, as text), ``shout`` (upper-cases), ``pid`` (this server's process id: one stdio server
for many calls means one id), ``fail`` (a tool error), ``wait_for_file`` (answers once a file exists: a test holds a
call open without timing), ``exit_server`` (the process exits, so the session breaks).
"""

from __future__ import annotations

import os
import sys
import time

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as _Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as _Server

transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
port = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
try:
    server = _Server("verl-test")
except TypeError:
    server = _Server("verl-test", host="127.0.0.1", port=port)


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> str:
    return str(a + b)


@server.tool(description="Upper-case a text.")
def shout(text: str) -> str:
    return text.upper()


@server.tool(description="The server's process id.")
def pid() -> str:
    return str(os.getpid())


@server.tool(description="Always fails.")
def fail() -> str:
    raise ValueError("the fail tool failed on purpose")


@server.tool(description="Answer once the file exists.")
def wait_for_file(path: str) -> str:
    while not os.path.exists(path):
        time.sleep(0.05)
    return "found"


@server.tool(description="Exit the server process.")
def exit_server() -> str:
    os._exit(0)


if __name__ == "__main__":
    if transport == "stdio":
        server.run()
    else:
        name = {"sse": "sse", "http": "streamable-http"}[transport]
        try:
            server.run(transport=name, host="127.0.0.1", port=port)
        except TypeError:
            server.run(transport=name)
