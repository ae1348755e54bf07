"""Gsm8kInteraction: a "try again" user for GSM8K. It scores the model's last answer and either ends the
conversation ("correct") or asks for another attempt.

As upstream: the last assistant message, as written, is scored by the gsm8k rule scorer in strict mode (the answer
must follow ``#### ``); the ground truth comes from ``extra_info.interaction_kwargs.ground_truth`` (None when the
row has none: every answer then scores 0).
"""

from __future__ import annotations

from typing import Any

from verl.interactions.base import BaseInteraction
from verl.rewards import gsm8k

__all__ = ["Gsm8kInteraction", "CORRECT_TEXT", "INCORRECT_TEXT"]

CORRECT_TEXT = "Your response is correct!"
INCORRECT_TEXT = "Your response is incorrect! You need to reflect on your answer and try again."


def _last_assistant_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, list):  # content parts: keep the text ones
                return "".join(part.get("text", "") for part in content if isinstance(part, dict))
            return content or ""
    return ""


class Gsm8kInteraction(BaseInteraction):
    async def start_interaction(self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs) -> str:
        instance_id = await super().start_interaction(instance_id)
        self._instance_dict[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs
    ) -> tuple[bool, str, float, dict[str, Any]]:
        state = self._state(instance_id)
        state["response"] = _last_assistant_text(messages)
        reward = await self.calculate_score(instance_id)
        state["reward"] = reward
        if reward == 1.0:
            return True, CORRECT_TEXT, reward, {}
        return False, INCORRECT_TEXT, reward, {}

    async def calculate_score(self, instance_id: str, **kwargs) -> float:
        state = self._state(instance_id)
        if state["ground_truth"] is None:
            return 0.0
        return gsm8k.compute_score(state["response"], state["ground_truth"], method="strict", format_score=0.0,
                                   score=1.0)

    async def finalize_interaction(self, instance_id: str, **kwargs) -> None:
        """Drop the instance's state; an id never started (or already finalized) raises KeyError, as upstream."""
        self._state(instance_id)
        del self._instance_dict[instance_id]

    def _state(self, instance_id: str) -> dict[str, Any]:
        try:
            return self._instance_dict[instance_id]
        except KeyError:
            raise KeyError(f"interaction {self.name!r}: no instance {instance_id!r}; call start_interaction() first "
                           "(or it was finalized)") from None
