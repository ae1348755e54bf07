"""What a reward manager reads from a rollout batch: decoded prompts and responses, lengths, and the
per-row data_source / ground_truth / extra_info."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from verl.protocol import DataProto


@dataclass
class RolloutTexts:
    prompt_strs: list[str]
    response_strs: list[str]
    valid_response_lengths: list[int]
    data_sources: list[Any]
    ground_truths: list[Any]
    extra_infos: list[dict]


def _require_tensor(data: DataProto, key: str) -> torch.Tensor:
    if data.batch is None or key not in data.batch.keys():
        available = [] if data.batch is None else sorted(data.batch.keys())
        raise KeyError(f"reward manager needs batch[{key!r}] from the rollout; the batch has {available}")
    return data.batch[key]


def valid_response_lengths(data: DataProto) -> torch.Tensor:
    """(bs,) number of real response tokens: the response part of `attention_mask`, else `response_mask`."""
    responses = _require_tensor(data, "responses")
    response_length = responses.shape[-1]
    keys = data.batch.keys()
    if "attention_mask" in keys and data.batch["attention_mask"].shape[-1] >= response_length:
        return data.batch["attention_mask"][:, -response_length:].sum(dim=-1).long()
    if "response_mask" in keys:
        return data.batch["response_mask"].sum(dim=-1).long()
    raise KeyError("reward manager needs batch['attention_mask'] (prompt+response) or batch['response_mask']")


def _prompt_ids_and_mask(data: DataProto, response_length: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    keys = data.batch.keys()
    if "attention_mask" not in keys:
        return None
    attention_mask = data.batch["attention_mask"]
    if "prompts" in keys:
        prompts = data.batch["prompts"]
        return prompts, attention_mask[:, : prompts.shape[-1]]
    if "input_ids" in keys and data.batch["input_ids"].shape[-1] > response_length:
        return data.batch["input_ids"][:, :-response_length], attention_mask[:, :-response_length]
    return None


def _column(data: DataProto, key: str, hint: str) -> Any:
    if key not in data.non_tensor_batch:
        raise KeyError(
            f"reward manager needs non_tensor_batch[{key!r}] ({hint}); available: {sorted(data.non_tensor_batch)}"
        )
    return data.non_tensor_batch[key]


def _ground_truth(reward_model: Any, row: int) -> Any:
    if not isinstance(reward_model, dict):
        raise TypeError(
            f"row {row}: non_tensor_batch['reward_model'] must be a dict with 'ground_truth', got {reward_model!r}"
        )
    return reward_model.get("ground_truth")


def _extra_info(data: DataProto, row: int) -> dict:
    """A copy, so scorers (and the num_turns we add) never change the batch."""
    column = data.non_tensor_batch.get("extra_info")
    info = dict(column[row]) if column is not None and column[row] is not None else {}
    if "__num_turns__" in data.non_tensor_batch:
        info["num_turns"] = data.non_tensor_batch["__num_turns__"][row]
    return info


def decode_rollouts(data: DataProto, tokenizer: Any, reward_fn_key: str = "data_source") -> RolloutTexts:
    """Decode every row's real response tokens (and prompt, for printing) with special tokens skipped."""
    responses = _require_tensor(data, "responses")
    lengths = valid_response_lengths(data).tolist()
    response_ids = [responses[i, :length].tolist() for i, length in enumerate(lengths)]
    response_strs = tokenizer.batch_decode(response_ids, skip_special_tokens=True)

    prompt_parts = _prompt_ids_and_mask(data, responses.shape[-1])
    if prompt_parts is None:
        prompt_strs = [""] * len(lengths)
    else:
        prompt_ids, prompt_mask = prompt_parts
        prompt_lists = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids, prompt_mask)]
        prompt_strs = tokenizer.batch_decode(prompt_lists, skip_special_tokens=True)

    data_sources = list(_column(data, reward_fn_key, "set data.reward_fn_key to the column naming the task"))
    reward_models = _column(data, "reward_model", "the dataset's reward_model column with ground_truth")
    return RolloutTexts(
        prompt_strs=prompt_strs,
        response_strs=response_strs,
        valid_response_lengths=lengths,
        data_sources=data_sources,
        ground_truths=[_ground_truth(reward_models[i], i) for i in range(len(lengths))],
        extra_infos=[_extra_info(data, i) for i in range(len(lengths))],
    )
