"""The agent loop (``actor_rollout_ref.rollout.mode=async``): one ``AgentLoopBase.run()`` coroutine per sample,
token in / token out against the rollout rank's engine. Upstream's import path ``verl.experimental.agent_loop``
re-exports these names."""

from verl.workers.rollout.agent_loop.base import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.workers.rollout.agent_loop.registry import register
from verl.workers.rollout.agent_loop.server import AsyncLLMServerManager, TokenOutput

__all__ = ["AgentLoopBase", "AgentLoopMetrics", "AgentLoopOutput", "AsyncLLMServerManager", "TokenOutput", "register"]
