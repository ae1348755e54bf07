"""Chat rendering for multi-turn loops: the prompt with tool schemas, and each new tool / user turn as a token
delta appended after the model's own tokens (which are never re-tokenized)."""

from __future__ import annotations

import logging
from typing import Any

from verl.data.chat_templates import resolve_chat_template

logger = logging.getLogger(__name__)

__all__ = ["ChatRenderer", "truncate_text"]

_TRUNCATED = "...(truncated)"


def truncate_text(text: str, limit: int, side: str) -> str:
    """At most ``limit`` characters of ``text`` kept: its start (left), its end (right) or both ends (middle)."""
    if len(text) <= limit:
        return text
    if side == "left":
        return text[:limit] + _TRUNCATED
    if side == "right":
        return _TRUNCATED + text[-limit:]
    if side == "middle":
        head = limit // 2
        return text[:head] + _TRUNCATED + text[len(text) - (limit - head):]
    raise ValueError(f"actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side={side!r}: use left, middle "
                     "or right")


class ChatRenderer:
    """``template_kwargs``: data.apply_chat_template_kwargs, extra template variables for every render (as the
    dataset renders the first prompt with them)."""

    def __init__(self, tokenizer: Any, choice: str, key: str, template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.template = resolve_chat_template(tokenizer, choice, key)  # None: the tokenizer's own
        self.template_kwargs = dict(template_kwargs or {})
        self._warned = False

    def render(self, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False,
                                                  add_generation_prompt=add_generation_prompt,
                                                  chat_template=self.template, **self.template_kwargs)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        return self.encode(self.render(messages, tools, add_generation_prompt=True))

    def delta_ids(self, history: list[dict], new_messages: list[dict], tools: list[dict] | None,
                  last_generated: list[int]) -> list[int]:
        """Tokens of ``new_messages`` (and the next generation prompt), to follow the model's last turn, which is
        ``history[-1]`` and ended with the tokens ``last_generated``."""
        base = self.render(history, tools, add_generation_prompt=False)
        full = self.render(history + new_messages, tools, add_generation_prompt=True)
        if not full.startswith(base):
            raise ValueError("the chat template renders the earlier turns differently once a tool or user turn "
                             "follows, so the turn cannot be appended as tokens; use "
                             "actor_rollout_ref.rollout.multi_turn.chat_template=verl_hermes")
        cut = len(base)
        if last_generated:
            # the model's turn stopped at its end-of-turn token; what the template writes after it (e.g. "\n")
            # is not in the model's tokens and belongs to the delta
            end_text = self.tokenizer.decode(last_generated[-1:], skip_special_tokens=False)
            position = base.rfind(end_text) if end_text.strip() else -1
            if position >= 0 and end_text in self.tokenizer.all_special_tokens:
                cut = position + len(end_text)
        return self.encode(full[cut:])

    def check_tokens(self, ids: list[int], messages: list[dict], tools: list[dict] | None, mode: str) -> bool:
        """multi_turn.tokenization_sanity_check_mode: does the trajectory's text equal the conversation rendered
        at once? ``strict`` compares exactly, ``ignore_strippable`` ignores whitespace, ``disable`` skips."""
        if mode == "disable":
            return True
        decoded = self.tokenizer.decode(ids, skip_special_tokens=False)
        rendered = self.render(messages, tools, add_generation_prompt=False)
        if mode == "ignore_strippable":
            same = "".join(rendered.split()).startswith("".join(decoded.split()))
        else:
            same = rendered.startswith(decoded)
        if not same and not self._warned:
            self._warned = True
            logger.warning("multi-turn tokenization check (%s): the trajectory's tokens decode to a text that differs "
                           "from the conversation rendered at once; the trained tokens are the generated ones. Set "
                           "actor_rollout_ref.rollout.multi_turn.tokenization_sanity_check_mode=disable to skip.", mode)
        return same
