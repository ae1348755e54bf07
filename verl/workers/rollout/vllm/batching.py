"""Between verl's padded batches and the engine's per-request token lists (no vLLM import: unit-testable)."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask

__all__ = ["prompt_token_lists", "responses_to_batch", "response_log_prob_rows"]


def prompt_token_lists(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[list[int]]:
    """The real tokens of every row (left padding dropped); a row without any is an error, not an empty prompt."""
    rows = []
    for i, (ids, mask) in enumerate(zip(input_ids, attention_mask)):
        tokens = ids[mask.bool()].tolist()
        if not tokens:
            raise ValueError(f"generate_sequences: prompt row {i} has no tokens (attention_mask is all zero)")
        rows.append(tokens)
    return rows


def responses_to_batch(prompts: torch.Tensor, prompt_mask: torch.Tensor, responses: list[list[int]],
                       log_probs: list[list[float]] | None, response_length: int, pad_token_id: int) -> DataProto:
    """verl's rollout output: responses right-padded to ``response_length``; the mask covers exactly the tokens the
    engine produced (through the first EOS, or all of them with ignore_eos); ``rollout_log_probs`` zero beyond."""
    batch_size = len(responses)
    resp = torch.full((batch_size, response_length), pad_token_id, dtype=prompts.dtype)
    response_mask = torch.zeros((batch_size, response_length), dtype=prompt_mask.dtype)
    sampled = torch.zeros((batch_size, response_length), dtype=torch.float32) if log_probs is not None else None
    for i, tokens in enumerate(responses):
        n = min(len(tokens), response_length)
        if n:
            resp[i, :n] = torch.tensor(tokens[:n], dtype=prompts.dtype)
            response_mask[i, :n] = 1
            if sampled is not None:
                sampled[i, :n] = torch.tensor(log_probs[i][:n], dtype=torch.float32)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    tensors = {
        "prompts": prompts,
        "responses": resp,
        "input_ids": torch.cat([prompts, resp], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask,
    }
    if sampled is not None:
        tensors["rollout_log_probs"] = sampled
    return DataProto(batch=TensorDict(tensors, batch_size=[batch_size]))


def response_log_prob_rows(data: DataProto) -> tuple[list[list[int]], list[int]]:
    """For scoring fixed sequences: per row, prompt tokens + the response tokens under ``response_mask``, and how
    many of those are response tokens."""
    batch = data.batch
    prompts = prompt_token_lists(batch["prompts"], batch["attention_mask"][:, : batch["prompts"].size(1)])
    sequences, counts = [], []
    for tokens, resp, mask in zip(prompts, batch["responses"], batch["response_mask"]):
        kept = resp[mask.bool()].tolist()
        sequences.append(tokens + kept)
        counts.append(len(kept))
    return sequences, counts
