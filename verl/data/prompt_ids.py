"""Fitting a tokenized prompt into data.max_prompt_length: truncation modes and left padding."""

from __future__ import annotations

import torch

TRUNCATION_MODES = ("error", "left", "right", "middle")


class PromptTooLongError(ValueError):
    """A prompt is longer than data.max_prompt_length and data.truncation is 'error'."""


def truncate_ids(ids: list[int], max_length: int, truncation: str, row: int) -> list[int]:
    """`ids` cut to `max_length`: left keeps the end, right keeps the start, middle keeps both ends."""
    if len(ids) <= max_length:
        return ids
    if truncation == "left":
        return ids[-max_length:]
    if truncation == "right":
        return ids[:max_length]
    if truncation == "middle":
        head = max_length // 2
        tail = max_length - head
        return ids[:head] + (ids[-tail:] if tail else [])
    if truncation == "error":
        raise PromptTooLongError(
            f"prompt of row {row} has {len(ids)} tokens, longer than data.max_prompt_length={max_length}. "
            "Raise data.max_prompt_length, set data.truncation to left/right/middle, or set "
            "data.filter_overlong_prompts=True to drop such rows."
        )
    raise ValueError(f"data.truncation must be one of {TRUNCATION_MODES}, got {truncation!r}")


def left_pad(ids: list[int], max_length: int, pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask), both LongTensor (max_length,), real tokens at the right end."""
    if len(ids) > max_length:
        raise ValueError(f"left_pad: {len(ids)} ids do not fit max_length={max_length}; truncate first")
    padding = max_length - len(ids)
    input_ids = torch.tensor([pad_token_id] * padding + list(ids), dtype=torch.long)
    attention_mask = torch.tensor([0] * padding + [1] * len(ids), dtype=torch.long)
    return input_ids, attention_mask
