"""Geo3kTool (``calc_geo3k_reward``): the model submits a Geometry3K answer and is told its reward.

The example tool of upstream's multi-turn geo3k recipe (vision-language rows: the image is in the prompt, the tool
takes text). Scoring is the geo3k rule with the submission taken whole (``use_boxed=False``) and no format share, as
upstream scores it. A submission that does not raise the reward above the previous best costs -0.05 as the step
reward. Rows give the ground truth in ``extra_info.tools_kwargs.calc_geo3k_reward.create_kwargs.ground_truth``.
"""

from __future__ import annotations

from verl.rewards import geo3k
from verl.tools.gsm8k_tool import Gsm8kTool

__all__ = ["Geo3kTool"]


class Geo3kTool(Gsm8kTool):
    """Gsm8kTool's per-trajectory state and step rewards; the submission scored whole by the geo3k rule."""

    @staticmethod
    def _submission(answer: str) -> str:
        return answer

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        return geo3k.compute_score(self._state(instance_id)["response"], self._ground_truth(instance_id),
                                   use_boxed=False, format_score=0.0)
