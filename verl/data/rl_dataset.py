"""RLHFDataset: prompts from verl-format parquet files, chat-templated and left-padded for rollout.

A row holds `data_source`, `prompt` (chat messages), `ability`, `reward_model` {style, ground_truth} and
`extra_info` {index, split, ...}. Items carry the padded prompt tensors plus every other column untouched,
so the reward manager sees the row's data_source and ground truth.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any

import numpy as np
import torch
from omegaconf import ListConfig
from torch.utils.data import Dataset

from verl.data.parquet_files import read_parquet_files
from verl.data.prompt_ids import TRUNCATION_MODES, left_pad, truncate_ids
from verl.utils.torch_functional import compute_position_id_with_mask

_LENGTH_BATCH = 1024


def _as_file_list(data_files: str | list[str] | ListConfig) -> list[str]:
    if isinstance(data_files, str):
        return [data_files]
    return [str(path) for path in data_files]


def _as_messages(prompt: Any, row: int, prompt_key: str) -> list[dict[str, Any]]:
    """The chat messages of a row; a plain string is taken as one user message."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list | tuple | np.ndarray) and all(
        isinstance(message, dict) and "role" in message and "content" in message for message in prompt
    ):
        return [dict(message) for message in prompt]
    raise ValueError(
        f"row {row}: column {prompt_key!r} (data.prompt_key) must hold chat messages "
        f"[{{'role': ..., 'content': ...}}, ...] or a string, got {prompt!r:.200}"
    )


class RLHFDataset(Dataset):
    """Config keys (the `data` section): prompt_key, max_prompt_length, truncation, filter_overlong_prompts,
    return_raw_chat, return_full_prompt, apply_chat_template_kwargs, shuffle and seed (for max_samples)."""

    def __init__(
        self,
        data_files: str | list[str],
        tokenizer: Any,
        config: Any,
        processor: Any = None,
        max_samples: int = -1,
    ) -> None:
        self.data_files = _as_file_list(data_files)
        self.original_data_files = copy.deepcopy(self.data_files)
        self.tokenizer = tokenizer
        self.processor = processor
        self.config = config
        self.max_samples = max_samples
        self.prompt_key = config.get("prompt_key", "prompt")
        self.max_prompt_length = int(config.get("max_prompt_length", 1024))
        self.truncation = config.get("truncation", "error")
        self.filter_overlong_prompts = bool(config.get("filter_overlong_prompts", True))
        self.return_raw_chat = bool(config.get("return_raw_chat", False))
        self.return_full_prompt = bool(config.get("return_full_prompt", False))
        self.apply_chat_template_kwargs = dict(config.get("apply_chat_template_kwargs") or {})
        self.shuffle = bool(config.get("shuffle", False))
        self.seed = config.get("seed")
        if self.truncation not in TRUNCATION_MODES:
            raise ValueError(f"data.truncation must be one of {TRUNCATION_MODES}, got {self.truncation!r}")
        self.pad_token_id = self._pad_token_id(tokenizer)
        self._read_files_and_tokenize()

    @staticmethod
    def _pad_token_id(tokenizer: Any) -> int:
        for attr in ("pad_token_id", "eos_token_id"):
            token_id = getattr(tokenizer, attr, None)
            if token_id is not None:
                return int(token_id)
        raise ValueError("the tokenizer has neither pad_token_id nor eos_token_id; set tokenizer.pad_token")

    # ---- loading ------------------------------------------------------------------------------------------

    def _read_files_and_tokenize(self) -> None:
        hint = f"Set data.prompt_key (now {self.prompt_key!r}) to the column holding the chat messages."
        self.dataframe = read_parquet_files(self.data_files, required_column=self.prompt_key, column_hint=hint)
        self._reject_multimodal()
        self.dataframe = self._take_max_samples(self.dataframe)
        if self.filter_overlong_prompts:
            self.dataframe = self._drop_overlong(self.dataframe)
        print(f"[RLHFDataset] {len(self.dataframe)} prompts from {self.data_files}")

    def _reject_multimodal(self) -> None:
        media = [key for key in ("images", "videos") if key in self.dataframe.column_names]
        if media and self.processor is not None:
            raise NotImplementedError(
                f"RLHFDataset: multimodal columns {media} are not supported yet; use a text-only dataset"
            )

    def _take_max_samples(self, frame: Any) -> Any:
        if self.max_samples is None or self.max_samples < 0 or self.max_samples >= len(frame):
            return frame
        if self.shuffle:
            rng = np.random.default_rng(self.seed)
            indices = rng.choice(len(frame), size=self.max_samples, replace=False).tolist()
        else:
            indices = list(range(self.max_samples))
        print(f"[RLHFDataset] kept {self.max_samples} of {len(frame)} rows (max_samples)")
        return frame.select(indices)

    def _drop_overlong(self, frame: Any) -> Any:
        prompts = frame[self.prompt_key]
        lengths: list[int] = []
        for start in range(0, len(prompts), _LENGTH_BATCH):
            texts = [
                self._chat_text(_as_messages(prompt, start + offset, self.prompt_key))
                for offset, prompt in enumerate(prompts[start : start + _LENGTH_BATCH])
            ]
            encoded = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
            lengths.extend(len(ids) for ids in encoded)
        keep = [row for row, length in enumerate(lengths) if length <= self.max_prompt_length]
        dropped = len(lengths) - len(keep)
        print(
            f"[RLHFDataset] filter_overlong_prompts: dropped {dropped} of {len(lengths)} prompts longer than "
            f"data.max_prompt_length={self.max_prompt_length}"
        )
        if not keep:
            raise ValueError(
                f"every prompt in {self.data_files} is longer than data.max_prompt_length={self.max_prompt_length} "
                "tokens; raise data.max_prompt_length"
            )
        return frame.select(keep) if dropped else frame

    def _chat_text(self, messages: list[dict[str, Any]]) -> str:
        if getattr(self.tokenizer, "chat_template", None) is None:
            raise ValueError(
                "the tokenizer has no chat_template, so chat prompts cannot be rendered; use an instruct model's "
                "tokenizer (or set tokenizer.chat_template)"
            )
        return self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **self.apply_chat_template_kwargs
        )

    # ---- items --------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.dataframe)

    def __getitem__(self, item: int) -> dict[str, Any]:
        row_dict: dict[str, Any] = dict(self.dataframe[item])
        messages = _as_messages(row_dict.pop(self.prompt_key), item, self.prompt_key)
        raw_prompt = self._chat_text(messages)
        ids = self.tokenizer.encode(raw_prompt, add_special_tokens=False)
        raw_prompt_ids = truncate_ids(ids, self.max_prompt_length, self.truncation, row=item)
        input_ids, attention_mask = left_pad(raw_prompt_ids, self.max_prompt_length, self.pad_token_id)

        row_dict["input_ids"] = input_ids
        row_dict["attention_mask"] = attention_mask
        row_dict["position_ids"] = compute_position_id_with_mask(attention_mask)
        row_dict["raw_prompt_ids"] = raw_prompt_ids
        if self.return_raw_chat:
            row_dict["raw_prompt"] = messages
        if self.return_full_prompt:
            row_dict["full_prompts"] = raw_prompt
        extra_info = row_dict.get("extra_info") or {}
        index = extra_info.get("index") if isinstance(extra_info, dict) else None
        row_dict["index"] = item if index is None else index
        return row_dict


def collate_fn(data_list: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack tensors; every other value becomes a 1-D object array with one entry per sample."""
    tensors: dict[str, list[torch.Tensor]] = defaultdict(list)
    non_tensors: dict[str, list[Any]] = defaultdict(list)
    for data in data_list:
        for key, value in data.items():
            (tensors if isinstance(value, torch.Tensor) else non_tensors)[key].append(value)
    batch: dict[str, Any] = {key: torch.stack(values, dim=0) for key, values in tensors.items()}
    for key, values in non_tensors.items():
        array = np.empty(len(values), dtype=object)
        for i, value in enumerate(values):
            array[i] = value
        batch[key] = array
    return batch
