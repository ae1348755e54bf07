"""Geo3kTool (``calc_geo3k_reward``): the model submits a Geometry3K answer and is told its reward.

The example tool of upstream's multi-turn geo3k recipe (vision-language rows: the image is in the prompt, the tool
takes text). Scoring is the geo3k rule with the submission taken whole (``use_boxed=False``) and no format share, as
upstream scores it. A submission that does not raise the reward above the previous best costs -0.05 as the step
reward. Rows give the ground truth in ``extra_info.tools_kwargs.calc_geo3k_reward.create_kwargs.ground_truth``.
"""

from __future__ import annotations

from typing import Any

from verl.rewards import geo3k
from verl.tools.base_tool import BaseTool
from verl.tools.gsm8k_tool import NON_IMPROVING_PENALTY
from verl.tools.schemas import ToolResponse

__all__ = ["Geo3kTool"]


class Geo3kTool(BaseTool):
    """State per trajectory: the ground truth (create kwarg ``ground_truth``), the last submission, its reward."""

    async def create(
        self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs
    ) -> tuple[str, ToolResponse]:
        if ground_truth is None:  # rollouts pass it either way
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        instance_id, response = await super().create(instance_id)
        self._instance_dict[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id, response

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        state = self._state(instance_id)
        answer = parameters.get("answer", "") if isinstance(parameters, dict) else ""
        state["response"] = answer if isinstance(answer, str) else str(answer)
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else NON_IMPROVING_PENALTY
        state["reward"] = reward
        return ToolResponse(text=f"Current parsed answer={state['response']!r} reward={reward!r}"), step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        state = self._state(instance_id)
        if state["ground_truth"] is None:
            raise ValueError(
                f"{self.name}: instance {instance_id!r} has no ground truth; the row's "
                f"extra_info.tools_kwargs.{self.name}.create_kwargs.ground_truth must be set")
        return geo3k.compute_score(state["response"], str(state["ground_truth"]), use_boxed=False, format_score=0.0)

    def _state(self, instance_id: str) -> dict[str, Any]:
        try:
            return self._instance_dict[instance_id]
        except KeyError:
            raise KeyError(f"{self.name}: no instance {instance_id!r}; call create() first (or it was released)") from None
