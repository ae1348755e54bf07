"""BaseInteraction: upstream verl's simulated user, which answers the model between turns.

A rollout with ``multi_turn.interaction_config_path`` calls, per trajectory: ``start_interaction(**interaction_kwargs)``
(the row's ``extra_info.interaction_kwargs``, whose ``name`` picks the interaction), then ``generate_response`` after
each assistant turn that makes no tool call, until it says to stop or the turn limits are reached, and finally
``finalize_interaction``.
"""

from __future__ import annotations

from typing import Any
from uuid import uuid4

__all__ = ["BaseInteraction"]


class BaseInteraction:
    def __init__(self, config: dict[str, Any] | None):
        self.config: dict[str, Any] = dict(config or {})
        self.name: str = self.config.get("name", "interaction_agent")
        self._instance_dict: dict[str, dict[str, Any]] = {}

    async def start_interaction(self, instance_id: str | None = None, **kwargs) -> str:
        """Start a trajectory's state; returns its id (a new uuid when none is given)."""
        if instance_id is None:
            instance_id = str(uuid4())
        self._instance_dict[instance_id] = {}
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """The user's next turn: (should_terminate, content, turn_score, extra)."""
        return False, "Your current result seems acceptable.", 0.0, {}

    async def calculate_score(self, instance_id: str, **kwargs) -> float:
        return 0.0

    async def finalize_interaction(self, instance_id: str, **kwargs) -> None:
        self._instance_dict.pop(instance_id, None)
