"""Upstream's module path for ToolAgentLoop."""

from verl.workers.rollout.agent_loop.tool_agent_loop import ToolAgentLoop

__all__ = ["ToolAgentLoop"]
