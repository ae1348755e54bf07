"""``verl.experimental.agent_loop.agent_loop``, upstream's module for the agent-loop base classes; they live in
verl.workers.rollout.agent_loop."""

from verl.workers.rollout.agent_loop.base import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.workers.rollout.agent_loop.manager import AgentLoopManager, AgentLoopWorker
from verl.workers.rollout.agent_loop.registry import register
from verl.workers.rollout.agent_loop.server import AsyncLLMServerManager, TokenOutput

__all__ = ["AgentLoopBase", "AgentLoopManager", "AgentLoopMetrics", "AgentLoopOutput", "AgentLoopWorker",
           "AsyncLLMServerManager", "TokenOutput", "register"]
