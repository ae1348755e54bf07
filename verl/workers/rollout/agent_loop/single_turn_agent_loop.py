"""``single_turn_agent``: one request per row, the row's prompt tokens as the sync rollout sends them (a vision row's
with its image and video tokens expanded, its images as ``image_data`` and its videos as ``video_data``)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from verl.utils.rollout_trace import rollout_trace_op
from verl.workers.rollout.agent_loop.base import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.workers.rollout.agent_loop.registry import register

__all__ = ["SingleTurnAgentLoop"]


@register("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        # raw_prompt_ids: the prompt exactly as the sync rollout tokenizes and sends it (left padding removed)
        prompt_ids = list(kwargs["raw_prompt_ids"])
        media = kwargs.get("multi_modal_data") or {}
        images, videos = media.get("image") or None, media.get("video") or None
        start = time.perf_counter()
        out = await self.server_manager.generate(uuid.uuid4().hex, prompt_ids=prompt_ids,
                                                 sampling_params=sampling_params, image_data=images,
                                                 **({"video_data": videos} if videos else {}))
        response_ids = out.token_ids[: self.response_length]
        log_probs = out.log_probs[: self.response_length] if out.log_probs is not None else None
        routed = out.routed_experts[: len(prompt_ids) + len(response_ids)] if out.routed_experts is not None else None
        return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=response_ids, response_mask=[1] * len(response_ids),
                               response_logprobs=log_probs, num_turns=2, routed_experts=routed,
                               multi_modal_data=_media(images, videos),
                               metrics=AgentLoopMetrics(generate_sequences=time.perf_counter() - start))


def _media(images: list[Any] | None, videos: list[Any] | None) -> dict[str, list[Any]] | None:
    media = {}
    if images:
        media["image"] = list(images)
    if videos:
        media["video"] = list(videos)
    return media or None
