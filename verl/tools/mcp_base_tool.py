"""MCPBaseTool: a tool served by an MCP server (upstream's class). The tool config's entry of ``config.type: mcp``
yields one per tool its servers serve; the schema is the server's and each call goes to the server
(verl.utils.mcp.client_manager).

``config`` keys read: ``timeout`` (seconds per call, default 30; the agent loop's ``tool_call_timeout`` follows it
unless set) and ``rate_limit`` (calls per second to the server,
default 10; read when the servers are loaded). A failed call (the tool's error, a timeout, a lost connection) is
answered to the model as ``{"result": "Tool call failed: ..."}`` and counted in the metrics, as upstream does;
nothing is retried, since a call may have run before its connection was lost.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.mcp import client_manager

__all__ = ["MCPBaseTool"]

logger = logging.getLogger(__name__)


def _is_error(result: Any) -> bool:
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", None))


class MCPBaseTool(BaseTool):
    def __init__(self, config: dict[str, Any] | None, tool_schema: OpenAIFunctionToolSchema | dict | None):
        super().__init__(config, tool_schema)
        self.timeout = float(self.config.get("timeout", 30))
        # the agent loop's own limit on a call (tool_call_timeout, 60 s by default) must not cut `timeout` short:
        # it also covers a wait for the rate limit and a reconnection
        self.config.setdefault("tool_call_timeout", self.timeout + client_manager.ClientManager.connect_timeout_s + 10.0)

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        instance_id, response = await super().create(instance_id)
        self._instance_dict[instance_id] = {"response": "", "reward": []}
        return instance_id, response

    async def _call_tool(self, instance_id: str, parameters: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """(the text the server answered, metadata with ``api_request_error`` empty unless the call failed)."""
        try:
            result = await client_manager.ClientManager.call_tool(self.name, parameters, self.timeout)
        except Exception as exc:  # noqa: BLE001 - a failed call is the model's information, not a crash
            logger.debug("MCP tool %s failed", self.name, exc_info=True)
            return "", {"api_request_error": f"Tool call failed: {type(exc).__name__}: {exc}", "status": "error"}
        text, metadata = self._parse_tool_result(result.content)
        metadata.setdefault("api_request_error", "")
        if _is_error(result):
            metadata["api_request_error"] = f"Tool call failed: {text}"
            metadata["status"] = "error"
        return text, metadata

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        if not self.name or parameters is None:
            return ToolResponse(text=json.dumps({"result": "Error: 'parameters' is missing or empty."})), 0.0, {}
        text, metadata = await self._call_tool(instance_id, parameters)
        error = metadata.get("api_request_error") or ""
        if error:
            text = json.dumps({"result": error})
        state = self._instance_dict.setdefault(instance_id, {"response": "", "reward": []})
        state["response"] = text
        state["reward"].append(text.strip())
        metrics = {"query_count": metadata.get("query_count", 0), "status": metadata.get("status", "unknown"),
                   "total_results": metadata.get("total_results", 0), "api_request_error": error}
        return ToolResponse(text=text), 0.0, metrics

    async def calc_reward(self, instance_id: str, **kwargs) -> list[str]:
        """Upstream's: the texts the server answered this trajectory, in call order (no score of its own)."""
        return list(self._instance_dict.get(instance_id, {}).get("reward", []))

    def _parse_tool_result(self, content: list) -> tuple[str, dict[str, Any]]:
        """The text parts of the server's answer, joined by spaces. Other parts (images, resources) are not shown
        to the model (as upstream); their number is in the metadata."""
        texts = [part.text for part in content if getattr(part, "type", None) == "text"]
        return " ".join(texts), {"status": "success", "non_text_parts": len(content) - len(texts)}
