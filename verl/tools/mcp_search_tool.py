"""MCPSearchTool (upstream's): an MCP tool for search servers. The answer is the server's text parts, concatenated;
the metrics count them as ``total_results``."""

from __future__ import annotations

from typing import Any

from verl.tools.mcp_base_tool import MCPBaseTool

__all__ = ["MCPSearchTool"]


class MCPSearchTool(MCPBaseTool):
    def _parse_tool_result(self, content: list) -> tuple[str, dict[str, Any]]:
        texts = [part.text for part in content if getattr(part, "type", None) == "text"]
        return "".join(texts), {"status": "success", "total_results": len(texts), "queries": [], "query_count": 0,
                                "api_request_error": ""}
