"""MultiTurnSFTDataset: whole conversations from parquet; the loss covers only the assistant turns.

A row's `data.multiturn.messages_key` column holds chat messages [{'role', 'content'}, ...]. The conversation is
rendered with the chat template one message at a time: each assistant turn is split into the generation header
(what `add_generation_prompt=True` appends — never trained, the model is given it at inference) and the text
the model must produce (content and end-of-turn token — trained). Pieces are tokenized separately and joined,
so the mask boundaries are exact. Items have the same keys and loss-mask convention as SFTDataset.

Optional columns: `data.multiturn.tools_key` (tool schemas passed to the template) and
`data.multiturn.enable_thinking_key` (a per-row `enable_thinking` flag for templates that take one).

Image-text conversations (upstream's `processor` argument): with a vision-language model folder's processor and
a `data.image_key` column, the messages' `<image>` placeholders take the row's images in order; the conversation
is rendered with the processor's chat template and each piece's images expanded into their vision tokens (never
trained). Items add (4, L) mrope `position_ids` and `pixel_values` / `image_grid_thw` (verl/data/sft_vision.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from verl.data.chat_templates import named_template
from verl.data.parquet_files import read_parquet_files
from verl.data.sft_dataset import (
    ImageRows,
    _as_file_list,
    fit_to_length,
    is_chat,
    pad_right,
    pad_token_id_of,
    render_chat,
)

TRAINED_ROLES = ("assistant",)


class ChatTemplateNotIncrementalError(ValueError):
    """Rendering a longer conversation changed the text of an earlier part, so turns cannot be masked exactly."""


def split_conversation(tokenizer: Any, messages: Sequence[dict], row: int, **chat_kwargs: Any) -> list[tuple[str, bool]]:
    """(text, trained) pieces whose concatenation is the rendered conversation; trained = assistant output.
    ``tokenizer`` renders the messages: a tokenizer, or a multi-modal processor for messages with image parts."""
    pieces: list[tuple[str, bool]] = []
    rendered = ""

    def extend(text: str, trained: bool, upto: int) -> None:
        nonlocal rendered
        if not text.startswith(rendered):
            raise ChatTemplateNotIncrementalError(
                f"row {row}: the chat template renders messages[:{upto}] differently once more messages follow "
                "(e.g. it drops earlier reasoning or adds a default system prompt only in some cases), so assistant "
                "turns cannot be located. Use a template that renders conversations incrementally (data.chat_template)"
                " or pre-render the data into prompt/response pairs for SFTDataset.")
        if len(text) > len(rendered):
            pieces.append((text[len(rendered):], trained))
        rendered = text

    for i, message in enumerate(messages):
        if message["role"] in TRAINED_ROLES:
            extend(render_chat(tokenizer, messages[:i], add_generation_prompt=True, **chat_kwargs), False, i)
        extend(render_chat(tokenizer, messages[: i + 1], add_generation_prompt=False, **chat_kwargs),
               message["role"] in TRAINED_ROLES, i + 1)
    return pieces


class MultiTurnSFTDataset(Dataset):
    """`config` is the typed `data` section (SFTDataConfig). Keys: multiturn.messages_key, multiturn.tools_key,
    multiturn.enable_thinking_key, max_length, truncation (error | left | right), chat_template,
    apply_chat_template_kwargs, image_key, video_key. ``processor``: the model folder's multi-modal processor (None
    for a text-only model), as upstream's argument."""

    def __init__(self, parquet_files: str | Sequence[str], tokenizer: Any, config: Any, processor: Any = None,
                 max_samples: int = -1) -> None:
        self.parquet_files = _as_file_list(parquet_files)
        self.tokenizer = tokenizer
        multiturn = config.multiturn
        self.messages_key = multiturn.messages_key
        self.tools_key = multiturn.tools_key
        self.enable_thinking_key = multiturn.enable_thinking_key
        self.max_length = config.max_length
        self.truncation = config.truncation
        self.chat_kwargs = dict(config.apply_chat_template_kwargs)
        if config.chat_template:
            tokenizer.chat_template = named_template(config.chat_template)  # "verl_hermes" names the bundled one
        self.pad_token_id = pad_token_id_of(tokenizer)
        hint = "Set data.multiturn.messages_key to the column holding the conversations."
        frame = read_parquet_files(self.parquet_files, required_column=self.messages_key, column_hint=hint)
        if 0 <= max_samples < len(frame):
            frame = frame.select(range(max_samples))
        self.messages = frame[self.messages_key]
        self.tools = frame[self.tools_key] if self.tools_key in frame.column_names else None
        self.thinking = frame[self.enable_thinking_key] if self.enable_thinking_key in frame.column_names else None
        self.images = ImageRows.build(frame, self.parquet_files, config, processor, self.pad_token_id)
        if self.images is not None:
            self.images.check([self.conversation(i) for i in range(len(self.messages))])

    def __len__(self) -> int:
        return len(self.messages)

    def _chat_kwargs(self, item: int) -> dict[str, Any]:
        kwargs = dict(self.chat_kwargs)
        if self.tools is not None and self.tools[item] is not None:
            kwargs["tools"] = list(self.tools[item])
        if self.thinking is not None and self.thinking[item] is not None:
            kwargs["enable_thinking"] = bool(self.thinking[item])
        return kwargs

    def conversation(self, item: int) -> list[dict]:
        messages = self.messages[item]
        if not is_chat(messages):
            raise ValueError(f"row {item}: column {self.messages_key!r} (data.multiturn.messages_key) must hold chat "
                             f"messages [{{'role': ..., 'content': ...}}, ...], got {messages!r:.200}")
        messages = [{k: v for k, v in dict(m).items() if v is not None} for m in messages]
        if not any(m["role"] in TRAINED_ROLES for m in messages):
            raise ValueError(f"row {item}: the conversation has no assistant message, so nothing would be trained")
        return messages

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        if self.images is not None:
            messages = self.images.encoder.typed_messages(self.conversation(item))
            return self.images.item(split_conversation(self.images.processor, messages, item,
                                                       **self._chat_kwargs(item)), item)
        ids: list[int] = []
        trained: list[int] = []
        for text, is_trained in split_conversation(self.tokenizer, self.conversation(item), item,
                                                   **self._chat_kwargs(item)):
            piece = self.tokenizer.encode(text, add_special_tokens=False)
            ids.extend(piece)
            trained.extend([int(is_trained)] * len(piece))
        ids, trained = fit_to_length(ids, trained, self.max_length, self.truncation, item)
        return pad_right(ids, trained, self.max_length, self.pad_token_id)


__all__ = ["MultiTurnSFTDataset", "split_conversation", "ChatTemplateNotIncrementalError"]
