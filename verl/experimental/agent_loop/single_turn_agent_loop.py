"""Upstream's module path for SingleTurnAgentLoop."""

from verl.workers.rollout.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

__all__ = ["SingleTurnAgentLoop"]
