"""An MCP server with one tool, ``calculate``: the value of an arithmetic expression (+ - * / // % ** and
parentheses on numbers). Started by the tool config's servers file over stdio; see docs/tools.md, "MCP tools".

    python examples/mcp_tools/calc_mcp_server.py             # stdio (what mcp_servers.json starts)
    python examples/mcp_tools/calc_mcp_server.py sse 8765    # or serve http://127.0.0.1:8765/sse
"""

from __future__ import annotations

import ast
import operator
import sys

try:  # mcp 2.x
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
        ast.USub: operator.neg, ast.UAdd: operator.pos}


def evaluate(expression: str) -> float | int:
    def value(node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            if isinstance(node.op, ast.Pow) and abs(value(node.right)) > 64:
                raise ValueError("exponent too large")
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.operand))
        raise ValueError(f"not arithmetic: {ast.unparse(node)!r}")
    return value(ast.parse(expression, mode="eval").body)


server = Server("calc")


@server.tool(description="Evaluate an arithmetic expression, e.g. (12 + 3) * 4.")
def calculate(expression: str) -> str:
    return str(evaluate(expression))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] != "stdio":
        port = int(sys.argv[2]) if len(sys.argv) > 2 else 8765
        server.run(transport={"sse": "sse", "http": "streamable-http"}[sys.argv[1]], host="127.0.0.1", port=port)
    else:
        server.run()
