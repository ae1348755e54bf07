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

from verl.data.data_check import sample_rows
from verl.data.parquet_files import read_parquet_files
from verl.data.prompt_ids import TRUNCATION_MODES, left_pad, truncate_ids
from verl.data.prompt_text import as_messages as _as_messages
from verl.data.prompt_text import chat_text as _chat_text
from verl.data.rl_vision import check_media_columns, vision_item, vision_prompt_length
from verl.data.tool_schemas import function_tool_schemas, tool_schemas
from verl.data.vision import split_placeholders
from verl.utils.torch_functional import compute_position_id_with_mask

_LENGTH_BATCH = 1024


def _as_file_list(data_files: str | list[str] | ListConfig) -> list[str]:
    if isinstance(data_files, str):
        return [data_files]
    return [str(path) for path in data_files]


def _prompt_lengths(prompts: list[Any], rows: list[int], tokenizer: Any, prompt_key: str,
                    template_kwargs: dict[str, Any] | None = None) -> dict[str, list[int]]:
    """Templated prompt lengths of one batch of rows (a module function: `datasets` ships it to worker processes)."""
    texts = [_chat_text(tokenizer, _as_messages(prompt, row, prompt_key), template_kwargs)
             for prompt, row in zip(prompts, rows)]
    return {"_prompt_length": [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]}


class RLHFDataset(Dataset):
    """`config` is the typed `data` section (DataConfig); read here: prompt_key, max_prompt_length, truncation,
    filter_overlong_prompts (+ _workers), return_raw_input_ids, return_raw_chat, return_full_prompt, shuffle and
    seed (for max_samples), apply_chat_template_kwargs (extra template variables, e.g. enable_thinking).

    Items: input_ids / attention_mask / position_ids (left-padded), raw_prompt_ids (the templated prompt's ids),
    index, every other column; raw_input_ids (the prompt's ids without the chat template, for a reward model
    whose template differs) with return_raw_input_ids; raw_prompt (the messages) with return_raw_chat;
    full_prompts (the templated text) with return_full_prompt.

    Vision-language rows (a `processor` and the data.image_key column): see `verl.data.rl_vision`; items then also
    carry multi_modal_data and (data.return_multi_modal_inputs) multi_modal_inputs, position_ids are (4, L)."""

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
        self.prompt_key = config.prompt_key
        self.max_prompt_length = config.max_prompt_length
        self.truncation = config.truncation
        self.filter_overlong_prompts = config.filter_overlong_prompts
        self.filter_overlong_prompts_workers = config.filter_overlong_prompts_workers
        self.return_raw_input_ids = config.return_raw_input_ids
        self.return_raw_chat = config.return_raw_chat
        self.return_full_prompt = config.return_full_prompt
        self.template_kwargs = dict(getattr(config, "apply_chat_template_kwargs", None) or {})
        # data.tool_config_path: the tools' schemas in the chat template the overlong-prompt filter counts (as
        # upstream's dataset; the tool agent loop renders them into the prompt it sends)
        self.tool_schemas = ((tool_schemas(getattr(config, "tool_config_path", None)) or [])
                             + function_tool_schemas(getattr(config, "function_tool_path", None))) or None
        tools = {"tools": self.tool_schemas} if self.tool_schemas else {}
        self.filter_template_kwargs = {**self.template_kwargs, **tools}
        self.shuffle = config.shuffle
        self.seed = config.seed
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
        self.vision = check_media_columns(list(self.dataframe.column_names), self.data_files, self.config,
                                          self.processor)
        # videos (data.video_key): the trainer checks what runs with them before Ray
        self.videos = self.vision and self.config.video_key in self.dataframe.column_names
        self.dataframe = self._take_max_samples(self.dataframe)
        if self.filter_overlong_prompts:
            self.dataframe = self._drop_overlong(self.dataframe)
        print(f"[RLHFDataset] {len(self.dataframe)} prompts from {self.data_files}")

    def _take_max_samples(self, frame: Any) -> Any:
        if self.max_samples is None or self.max_samples < 0 or self.max_samples >= len(frame):
            return frame
        indices = sample_rows(len(frame), self.max_samples, self.shuffle, self.seed)  # as the data check picks
        print(f"[RLHFDataset] kept {self.max_samples} of {len(frame)} rows (max_samples)")
        return frame.select(indices)

    def _drop_overlong(self, frame: Any) -> Any:
        if len(frame) == 0:  # not "every prompt is too long": there are none
            raise ValueError(f"{self.data_files} hold no rows; point data.train_files / data.val_files at the data")
        # data.filter_overlong_prompts_workers processes tokenize the prompts (one: in this process)
        workers = self.filter_overlong_prompts_workers
        if self.vision:  # image tokens counted: the processor runs on every row (in this process)
            lengths = [vision_prompt_length(self.processor, _as_messages(row[self.prompt_key], i, self.prompt_key),
                                            row, self.config.image_key, i, self.filter_template_kwargs,
                                            self.config.video_key, getattr(self.config, "image_patch_size", None))
                       for i, row in enumerate(frame)]
        else:
            lengths = self._text_lengths(frame, workers)
        keep = [row for row, length in enumerate(lengths) if length <= self.max_prompt_length]
        dropped = len(lengths) - len(keep)
        print(
            f"[RLHFDataset] filter_overlong_prompts: dropped {dropped} of {len(lengths)} prompts longer than "
            f"data.max_prompt_length={self.max_prompt_length}"
        )
        if not keep:
            raise ValueError(
                f"every one of the {len(lengths)} prompts in {self.data_files} is longer than "
                f"data.max_prompt_length={self.max_prompt_length} tokens; raise data.max_prompt_length"
            )
        return frame.select(keep) if dropped else frame

    def _text_lengths(self, frame: Any, workers: int) -> list[int]:
        return frame.select_columns([self.prompt_key]).map(
            _prompt_lengths, fn_kwargs={"tokenizer": self.tokenizer, "prompt_key": self.prompt_key,
                                        "template_kwargs": self.filter_template_kwargs},
            input_columns=[self.prompt_key], with_indices=True, batched=True,
            batch_size=_LENGTH_BATCH, remove_columns=[self.prompt_key], num_proc=workers if workers > 1 else None,
            desc="filter_overlong_prompts",
        )["_prompt_length"]

    def _chat_text(self, messages: list[dict[str, Any]]) -> str:
        return _chat_text(self.tokenizer, messages, self.template_kwargs)

    # ---- items --------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.dataframe)

    def __getitem__(self, item: int) -> dict[str, Any]:
        row_dict: dict[str, Any] = dict(self.dataframe[item])
        messages = _as_messages(row_dict.pop(self.prompt_key), item, self.prompt_key)
        if self.vision:
            return self._vision_item(row_dict, messages, item)
        raw_prompt = self._chat_text(messages)
        ids = self.tokenizer.encode(raw_prompt, add_special_tokens=False)
        raw_prompt_ids = truncate_ids(ids, self.max_prompt_length, self.truncation, row=item)
        input_ids, attention_mask = left_pad(raw_prompt_ids, self.max_prompt_length, self.pad_token_id)

        row_dict["input_ids"] = input_ids
        row_dict["attention_mask"] = attention_mask
        row_dict["position_ids"] = compute_position_id_with_mask(attention_mask)
        row_dict["raw_prompt_ids"] = raw_prompt_ids
        if self.return_raw_input_ids:
            plain = "\n".join(str(message["content"]) for message in messages)
            row_dict["raw_input_ids"] = truncate_ids(self.tokenizer.encode(plain, add_special_tokens=False),
                                                     self.max_prompt_length, self.truncation, row=item)
        if self.return_raw_chat:
            row_dict["raw_prompt"] = messages
        if self.return_full_prompt:
            row_dict["full_prompts"] = raw_prompt
        return self._with_index(row_dict, item)

    def _vision_item(self, row_dict: dict[str, Any], messages: list[dict[str, Any]], item: int) -> dict[str, Any]:
        row_dict.update(vision_item(self.processor, self.tokenizer, messages, row_dict, self.config, item,
                                    self.pad_token_id))
        if self.return_raw_input_ids:
            raise NotImplementedError("data.return_raw_input_ids with image rows is not built (a reward model "
                                      "reading images is not either); set it to false")
        if self.return_raw_chat:
            row_dict["raw_prompt"] = messages
        if self.return_full_prompt:
            row_dict["full_prompts"] = self.processor.apply_chat_template(
                split_placeholders(messages), add_generation_prompt=True, tokenize=False, **self.template_kwargs)
        return self._with_index(row_dict, item)

    @staticmethod
    def _with_index(row_dict: dict[str, Any], item: int) -> dict[str, Any]:
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
