"""SFTDataset: single-turn (prompt, response) pairs from parquet files, tokenized for next-token training.

Every item is right-padded to `data.max_length` and holds `input_ids`, `attention_mask`, `position_ids` and
`loss_mask`. The loss mask follows upstream verl's convention: it is aligned with the *predicting* position,
`loss_mask[t] == 1` when the token at `t + 1` is trained, so the trainer compares `logits[:, :-1]` with
`input_ids[:, 1:]` under `loss_mask[:, :-1]`. Only response tokens are trained; the prompt (rendered with the
chat template, generation header included) never is.

With a processor (a vision-language model folder's, `verl.models.processor.load_processor`) and a
`data.image_key` column, the prompt's `<image>` placeholders are rendered with the processor's chat template and
expanded into the images' vision tokens; items then carry (4, L) mrope `position_ids` and the row's `pixel_values`
/ `image_grid_thw` (verl/data/sft_vision.py).

The helpers at the bottom (`fit_to_length`, `pad_right`, `prediction_mask`, `ImageRows`) are shared with the
multi-turn dataset, so both datasets cut, pad and align masks identically.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from verl.data.chat_templates import named_template
from verl.data.parquet_files import read_parquet_files
from verl.data.sft_vision import VisionSFTEncoder, check_placeholder_count, row_images, row_videos, uses_images
from verl.utils.torch_functional import compute_position_id_with_mask


class SFTResponseTooLongError(ValueError):
    """A sample does not fit data.max_length and data.truncation is 'error'."""


def _as_file_list(files: str | Sequence[str]) -> list[str]:
    return [files] if isinstance(files, str) else [str(f) for f in files]


def _dig(value: Any, keys: Sequence[str], column: str, dict_keys_name: str, row: int) -> Any:
    """`value[k1][k2]...`: the nested field `data.<prompt|response>_dict_keys` points at."""
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            have = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise KeyError(f"row {row}: column {column!r} has no field {key!r} (data.{dict_keys_name}={list(keys)}); "
                           f"it holds {have}")
        value = value[key]
    return value


def is_chat(value: Any) -> bool:
    """A list of {'role', 'content'} messages (parquet gives numpy arrays of dicts)."""
    return isinstance(value, list | tuple | np.ndarray) and len(value) > 0 and all(
        isinstance(m, dict) and "role" in m and "content" in m for m in value)


def render_chat(tokenizer: Any, messages: Sequence[dict], add_generation_prompt: bool, **kwargs: Any) -> str:
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError("the tokenizer has no chat_template, so chat messages cannot be rendered; use an instruct "
                         "model's tokenizer or set data.chat_template to a Jinja chat template")
    return tokenizer.apply_chat_template([dict(m) for m in messages], add_generation_prompt=add_generation_prompt,
                                         tokenize=False, **kwargs)


def pad_token_id_of(tokenizer: Any) -> int:
    for attr in ("pad_token_id", "eos_token_id"):
        token_id = getattr(tokenizer, attr, None)
        if token_id is not None:
            return int(token_id)
    raise ValueError("the tokenizer has neither pad_token_id nor eos_token_id; set tokenizer.pad_token")


class SFTDataset(Dataset):
    """`config` is the typed `data` section (SFTDataConfig; anything with the same attributes works). Keys: prompt_key, response_key, prompt_dict_keys, response_dict_keys,
    max_length, truncation (error | left | right), chat_template, apply_chat_template_kwargs.

    The prompt column may hold a string (sent as one user message through the chat template), chat messages,
    or a dict (then `prompt_dict_keys` names the nested field); the response column a string or a dict
    (`response_dict_keys`). The response is followed by the tokenizer's EOS token, which is trained too, so the
    model learns to stop. With `processor` and a `data.image_key` column, the prompt's `<image>` placeholders take
    the row's images (see the module docstring).
    """

    def __init__(self, parquet_files: str | Sequence[str], tokenizer: Any, config: Any, max_samples: int = -1,
                 processor: Any = None) -> None:
        self.parquet_files = _as_file_list(parquet_files)
        self.tokenizer = tokenizer
        self.prompt_key = config.prompt_key
        self.response_key = config.response_key
        self.prompt_dict_keys = list(config.prompt_dict_keys or ())  # null: the column holds the text itself
        self.response_dict_keys = list(config.response_dict_keys or ())
        self.max_length = config.max_length
        self.truncation = config.truncation
        self.chat_kwargs = dict(config.apply_chat_template_kwargs)
        if config.chat_template:
            tokenizer.chat_template = named_template(config.chat_template)  # "verl_hermes" names the bundled one
        if getattr(tokenizer, "eos_token", None) is None:
            raise ValueError("the tokenizer has no eos_token; SFT appends it to every response so the model learns "
                             "to stop")
        self.pad_token_id = pad_token_id_of(tokenizer)
        hint = "Set data.prompt_key / data.response_key to the columns holding the prompt and the response."
        frame = read_parquet_files(self.parquet_files, required_column=self.prompt_key, column_hint=hint,
                                   files_key="data.train_files / data.val_files")
        if self.response_key not in frame.column_names:
            raise ValueError(f"{self.parquet_files}: no column {self.response_key!r} (data.response_key); columns: "
                             f"{frame.column_names}")
        if 0 <= max_samples < len(frame):
            frame = frame.select(range(max_samples))
        self.prompts = frame[self.prompt_key]
        self.responses = frame[self.response_key]
        self.images = ImageRows.build(frame, self.parquet_files, config, processor, self.pad_token_id)
        if self.images is not None:
            self.images.check([self._prompt(i) for i in range(len(self.prompts))])

    def __len__(self) -> int:
        return len(self.prompts)

    def _prompt(self, item: int) -> list[dict]:
        prompt = _dig(self.prompts[item], self.prompt_dict_keys, self.prompt_key, "prompt_dict_keys", item)
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        if not is_chat(prompt):
            raise ValueError(f"row {item}: the prompt (data.prompt_key={self.prompt_key!r}) must be a string or chat "
                             f"messages, got {prompt!r:.200}")
        return [dict(m) for m in prompt]

    def prompt_text(self, item: int) -> str:
        """The prompt as the model sees it at generation time: chat-templated with the assistant header."""
        if self.images is not None:
            return render_chat(self.images.processor, self.images.encoder.typed_messages(self._prompt(item)),
                               add_generation_prompt=True, **self.chat_kwargs)
        return render_chat(self.tokenizer, self._prompt(item), add_generation_prompt=True, **self.chat_kwargs)

    def response_text(self, item: int) -> str:
        response = _dig(self.responses[item], self.response_dict_keys, self.response_key, "response_dict_keys", item)
        if not isinstance(response, str):
            raise ValueError(f"row {item}: the response (data.response_key={self.response_key!r}) must be a string, "
                             f"got {type(response).__name__}; use data.response_dict_keys for a nested field")
        return response + self.tokenizer.eos_token

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        if self.images is not None:
            return self.images.item([(self.prompt_text(item), False), (self.response_text(item), True)], item)
        prompt_ids = self.tokenizer.encode(self.prompt_text(item), add_special_tokens=False)
        response_ids = self.tokenizer.encode(self.response_text(item), add_special_tokens=False)
        ids = list(prompt_ids) + list(response_ids)
        trained = [0] * len(prompt_ids) + [1] * len(response_ids)
        ids, trained = fit_to_length(ids, trained, self.max_length, self.truncation, item)
        return pad_right(ids, trained, self.max_length, self.pad_token_id)


# ---- shared with MultiTurnSFTDataset ----------------------------------------------------------------------------


def fit_to_length(ids: list[int], trained: list[int], max_length: int, truncation: str,
                  row: int) -> tuple[list[int], list[int]]:
    """Cut a sample to `max_length` tokens: 'left' keeps the end, 'right' the start; 'error' refuses."""
    if len(ids) <= max_length:
        return ids, trained
    if truncation == "left":
        return ids[-max_length:], trained[-max_length:]
    if truncation == "right":
        return ids[:max_length], trained[:max_length]
    raise SFTResponseTooLongError(
        f"sample {row} has {len(ids)} tokens, more than data.max_length={max_length}. Raise data.max_length or set "
        "data.truncation to left (drop the start of the prompt) or right (drop the end of the response).")


def prediction_mask(trained: Sequence[int]) -> list[int]:
    """Token mask -> loss mask on predicting positions: out[t] = trained[t + 1]; the last position predicts
    nothing."""
    return list(trained[1:]) + [0]


def pad_right(ids: list[int], trained: list[int], max_length: int, pad_token_id: int) -> dict[str, torch.Tensor]:
    padding = max_length - len(ids)
    input_ids = torch.tensor(list(ids) + [pad_token_id] * padding, dtype=torch.long)
    attention_mask = torch.tensor([1] * len(ids) + [0] * padding, dtype=torch.long)
    loss_mask = torch.tensor(prediction_mask(trained) + [0] * padding, dtype=torch.long)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "loss_mask": loss_mask,
    }


class ImageRows:
    """The image (and video) columns of an SFT dataset whose model folder has a processor: checks every row up front
    (a bad image or video, or a placeholder count that differs from the row's, stops the run before training, naming
    the row and the column) and builds the rows' items through VisionSFTEncoder."""

    def __init__(self, column: Sequence[Any] | None, image_key: str, processor: Any, encoder: VisionSFTEncoder,
                 video_column: Sequence[Any] | None = None, video_key: str | None = None) -> None:
        self.column = column
        self.image_key = image_key
        self.processor = processor
        self.encoder = encoder
        self.video_column = video_column
        self.video_key = video_key

    @classmethod
    def build(cls, frame: Any, files: Sequence[str], config: Any, processor: Any,
              pad_token_id: int) -> ImageRows | None:
        """None when the files have no image column (a text dataset, whatever the model)."""
        if not uses_images(frame.column_names, files, config, processor):
            return None
        if config.chat_template:  # the processor renders image rows, so it takes the override too
            processor.chat_template = named_template(config.chat_template)
        encoder = VisionSFTEncoder(processor, config.max_length, config.truncation, pad_token_id)
        columns = frame.column_names
        images = frame[config.image_key] if config.image_key in columns else None
        videos = frame[config.video_key] if config.video_key and config.video_key in columns else None
        return cls(images, config.image_key, processor, encoder, videos, config.video_key)

    def images(self, row: int) -> list[Any]:
        return [] if self.column is None else row_images(self.column[row], self.image_key, row)

    def videos(self, row: int) -> list[Any]:
        """The row's videos as (frames, metadata) pairs (verl.data.video)."""
        if self.video_column is None:
            return []
        return row_videos(self.video_column[row], self.video_key, row, self.processor)

    def check(self, conversations: Sequence[Sequence[dict]]) -> None:
        for row, messages in enumerate(conversations):
            check_placeholder_count(messages, self.images(row), self.image_key, row, self.videos(row), self.video_key)

    def item(self, pieces: Sequence[tuple[str, bool]], row: int) -> dict[str, torch.Tensor]:
        encoder = self.encoder
        ids, trained, inputs = encoder.encode(pieces, self.images(row), row, self.videos(row))
        item = pad_right(ids, trained, encoder.max_length, encoder.pad_token_id)
        item["position_ids"] = encoder.position_ids(item["input_ids"], item["attention_mask"], inputs)
        item.update(inputs)
        return item


__all__ = ["SFTDataset", "ImageRows", "fit_to_length", "pad_right", "prediction_mask"]
