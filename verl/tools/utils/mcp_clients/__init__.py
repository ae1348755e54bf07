"""Upstream's import path for the MCP client manager; the manager lives in verl.utils.mcp (the dataset reads MCP
tools' schemas too, and sits below verl.tools)."""
