"""A row's prompt as the model sees it: chat messages (a plain string is one user message) rendered with the
tokenizer's chat template and the generation prompt. RLHFDataset and the data check both render through here, so
the length the check measures is the length the dataset produces."""

from __future__ import annotations

from typing import Any

import numpy as np


def as_messages(prompt: Any, row: int, prompt_key: str) -> list[dict[str, Any]]:
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


def chat_text(tokenizer: Any, messages: list[dict[str, Any]], template_kwargs: dict[str, Any] | None = None) -> str:
    """``template_kwargs``: data.apply_chat_template_kwargs, extra variables for the template (e.g.
    ``enable_thinking``)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "the tokenizer has no chat_template, so chat prompts cannot be rendered; use an instruct model's "
            "tokenizer (or set tokenizer.chat_template)"
        )
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **(template_kwargs or {}))
