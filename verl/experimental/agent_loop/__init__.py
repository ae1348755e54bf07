"""Upstream's import path for the agent loop: ``from verl.experimental.agent_loop import AgentLoopBase, ...``."""

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopManager,
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorker,
    AsyncLLMServerManager,
    TokenOutput,
    register,
)
from verl.workers.rollout.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.workers.rollout.agent_loop.tool_agent_loop import ToolAgentLoop

__all__ = ["AgentLoopBase", "AgentLoopManager", "AgentLoopMetrics", "AgentLoopOutput", "AgentLoopWorker",
           "AsyncLLMServerManager", "SingleTurnAgentLoop", "TokenOutput", "ToolAgentLoop", "register"]
