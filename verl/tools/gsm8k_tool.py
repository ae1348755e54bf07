"""Gsm8kTool (``calc_gsm8k_reward``): the model submits an answer and is told whether it is right.

The example tool of upstream's multi-turn GSM8K recipe. Scoring is the gsm8k rule scorer in flexible mode (the
last number in the submitted text), with the answer prefixed by ``#### `` as upstream does. A submission that does
not raise the reward above the previous best costs -0.05 as the step reward, so resubmitting the same answer is
discouraged.
"""

from __future__ import annotations

from typing import Any

from verl.rewards import gsm8k
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse

__all__ = ["Gsm8kTool", "NON_IMPROVING_PENALTY"]

NON_IMPROVING_PENALTY = -0.05


class Gsm8kTool(BaseTool):
    """State per trajectory: the ground truth (create kwarg ``ground_truth``), the last submission, its reward."""

    async def create(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs
    ) -> tuple[str, ToolResponse]:
        # Rollouts call either create(ground_truth=...) or create(create_kwargs={"ground_truth": ...}).
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        instance_id, response = await super().create(instance_id)
        self._instance_dict[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id, response

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        state = self._state(instance_id)
        answer = parameters.get("answer", "") if isinstance(parameters, dict) else ""
        if not isinstance(answer, str):
            answer = str(answer)
        state["response"] = self._submission(answer)
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else NON_IMPROVING_PENALTY
        state["reward"] = reward
        return ToolResponse(text=f"Current parsed answer={answer!r} reward={reward!r}"), step_reward, {}

    @staticmethod
    def _submission(answer: str) -> str:
        """What is scored: the answer as gsm8k's rule reads it (after ``#### ``)."""
        return answer if answer.startswith("#### ") else "#### " + answer

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        state = self._state(instance_id)
        return gsm8k.compute_score(
            state["response"], self._ground_truth(instance_id), method="flexible", format_score=0.0, score=1.0
        )

    def _ground_truth(self, instance_id: str) -> str:
        truth = self._state(instance_id)["ground_truth"]
        if truth is None:
            raise ValueError(
                f"{self.name}: instance {instance_id!r} has no ground truth; the row's "
                f"extra_info.tools_kwargs.{self.name}.create_kwargs.ground_truth must be set"
            )
        return str(truth)

    def _state(self, instance_id: str) -> dict[str, Any]:
        try:
            return self._instance_dict[instance_id]
        except KeyError:
            raise KeyError(f"{self.name}: no instance {instance_id!r}; call create() first (or it was released)") from None
