"""Agent-loop trajectories -> the rollout batch every later stage reads (the same keys as the sync rollout).

- ``prompts`` left-padded to ``prompt_length``; ``responses`` right-padded to ``response_length``;
- ``attention_mask`` covers every real token (tool and user turns included: the model attends to them);
- ``response_mask`` is 1 on the model's tokens only, so losses, KL, entropy and advantages skip the rest;
- ``rollout_log_probs`` (when every trajectory has them) is 0 at tool/user tokens;
- a trajectory's trailing tool/user tokens (after the model's last turn) are dropped;
- ``rm_scores`` when a loop set ``reward_score``: the score on the last response token; ``__rm_scored__`` marks
  the rows that have one, so the reward function scores only the others;
- ``routed_experts`` (R3, when any trajectory has a record): (bs, prompt_length + response_length, moe_layers,
  top_k) aligned with ``input_ids``; NOT_ROUTED (-1) at padding and wherever the engine recorded nothing (the last
  generated token, tool/user tokens spliced in after the last turn), which the actor's replay leaves to route itself;
- ``__num_turns__`` (upstream's column) and each ``extra_fields`` entry become per-row object columns.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.models.router_replay import ROUTED_EXPERTS_KEY, place_record, routing_canvas
from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.rollout.agent_loop.base import AgentLoopOutput

__all__ = ["outputs_to_batch"]


def outputs_to_batch(outputs: list[AgentLoopOutput], prompt_length: int, response_length: int,
                     pad_token_id: int) -> DataProto:
    bs = len(outputs)
    prompts = torch.full((bs, prompt_length), pad_token_id, dtype=torch.long)
    prompt_mask = torch.zeros((bs, prompt_length), dtype=torch.long)
    responses = torch.full((bs, response_length), pad_token_id, dtype=torch.long)
    response_attention = torch.zeros((bs, response_length), dtype=torch.long)
    response_mask = torch.zeros((bs, response_length), dtype=torch.long)
    with_log_probs = bool(outputs) and all(o.response_logprobs is not None for o in outputs)
    log_probs = torch.zeros((bs, response_length), dtype=torch.float32)
    rm_scores = torch.zeros((bs, response_length), dtype=torch.float32)
    scored = np.zeros(bs, dtype=bool)
    routed = routing_canvas([o.routed_experts for o in outputs], prompt_length + response_length, "agent loop outputs")
    for i, out in enumerate(outputs):
        out.check(f"agent loop output {i}")
        n_prompt = len(out.prompt_ids)
        if n_prompt > prompt_length:
            raise ValueError(f"agent loop output {i}: the prompt is {n_prompt} tokens (rendered with the tool schemas "
                             f"and the chat template), over rollout.prompt_length={prompt_length}; raise "
                             "data.max_prompt_length or shorten the system prompt / tool descriptions")
        prompts[i, prompt_length - n_prompt:] = torch.tensor(out.prompt_ids, dtype=torch.long)
        prompt_mask[i, prompt_length - n_prompt:] = 1
        n = min(_through_last_model_token(out.response_mask), response_length)
        if n:
            responses[i, :n] = torch.tensor(out.response_ids[:n], dtype=torch.long)
            response_attention[i, :n] = 1
            response_mask[i, :n] = torch.tensor(out.response_mask[:n], dtype=torch.long)
            if with_log_probs:
                log_probs[i, :n] = torch.tensor(out.response_logprobs[:n], dtype=torch.float32)
        if routed is not None and out.routed_experts is not None:
            place_record(routed[i], out.routed_experts, n_prompt, n, prompt_length)
        if out.reward_score is not None:
            scored[i] = True
            rm_scores[i, max(n - 1, 0)] = float(out.reward_score)
    attention_mask = torch.cat([prompt_mask, response_attention], dim=1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask * response_attention,
    }
    if with_log_probs:
        tensors["rollout_log_probs"] = log_probs * response_mask
    if scored.any():
        tensors["rm_scores"] = rm_scores
    if routed is not None:
        tensors[ROUTED_EXPERTS_KEY] = routed
    non_tensors: dict[str, np.ndarray] = {"__num_turns__": _column([o.num_turns for o in outputs])}
    if scored.any():
        non_tensors["__rm_scored__"] = _column(scored.tolist())
    for key in sorted({k for o in outputs for k in o.extra_fields}):
        non_tensors[key] = _column([o.extra_fields.get(key) for o in outputs])
    return DataProto(batch=TensorDict(tensors, batch_size=[bs]), non_tensor_batch=non_tensors)


def _through_last_model_token(mask: list[int]) -> int:
    """Tool or user tokens after the model's last turn influence no trained token; dropping them puts the
    reward on the model's last token, where the masked advantage estimators read it."""
    for i in range(len(mask) - 1, -1, -1):
        if mask[i]:
            return i + 1
    return 0


def _column(values: list[Any]) -> np.ndarray:
    column = np.empty(len(values), dtype=object)
    column[:] = values
    return column
