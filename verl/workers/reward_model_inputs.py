"""What the reward model reads: the rollout's token ids as they are, or prompt and response re-templated.

A reward model trained with another chat template (or another tokenizer) than the policy's must see the
conversation in its own format. When ``reward_model.model.input_tokenizer`` (the policy's tokenizer) differs from
the reward model's, each row is turned back into a chat and rendered again, as upstream verl does:

- the prompt's messages come from the dataset (``raw_prompt``, kept with ``data.return_raw_chat=true``); without
  them, the decoded prompt is stripped of the input tokenizer's chat template, which works for a single user turn
  (the template's text around one user message is found by rendering a marker message);
- the response is decoded with the input tokenizer, its EOS text removed, and appended as the assistant's turn;
- the reward model's tokenizer renders the chat (no generation prompt) and tokenizes it, cut to
  ``reward_model.max_length`` tokens from the right when set, and the batch is right-padded.

Either way the score is read at each row's last real token.

A generative judge reads text instead: ``reward_texts`` gives each row's last user question, decoded response and
``reward_model.ground_truth`` (upstream's ``RewardModelWorker._extract_inputs_for_reward``), the input of
``verl.utils.reward_process.reward_preprocess``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto

__all__ = ["same_tokenizer", "chat_messages", "response_text", "retemplate", "last_token_index", "response_score_index",
           "reward_texts"]

_MARKER = "\u2063verl-rm-content\u2063"  # an invisible separator around a word no template contains


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether ids from ``a`` mean the same text to ``b`` in the same chat format (then nothing is re-templated)."""
    if a is b:
        return True
    return a.get_vocab() == b.get_vocab() and getattr(a, "chat_template", None) == getattr(b, "chat_template", None)


def _template_frame(tokenizer: Any) -> tuple[str, str]:
    """The text a chat template puts before and after the content of a lone user message (generation prompt on)."""
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": _MARKER}], add_generation_prompt=True,
                                             tokenize=False)
    if rendered.count(_MARKER) != 1:
        raise ValueError("the input tokenizer's chat template does not render a user message's content verbatim; "
                         "set data.return_raw_chat=true so the reward model gets the dataset's messages")
    before, after = rendered.split(_MARKER)
    return before, after


def chat_messages(data: DataProto, row: int, input_tokenizer: Any, frame: tuple[str, str] | None) -> list[dict]:
    """The prompt of ``row`` as chat messages: the dataset's (``raw_prompt``) or the decoded prompt's content."""
    raw = data.non_tensor_batch.get("raw_prompt")
    if raw is not None:
        messages = raw[row]
        if not isinstance(messages, (list, tuple, np.ndarray)):
            raise TypeError(f"raw_prompt of row {row} is a {type(messages).__name__}, expected a list of chat messages")
        return [dict(m) for m in messages]
    prompt_len = data.batch["prompts"].size(1)
    mask = data.batch["attention_mask"][row, :prompt_len].bool()
    text = input_tokenizer.decode(data.batch["prompts"][row][mask].tolist(), skip_special_tokens=False)
    before, after = frame if frame is not None else _template_frame(input_tokenizer)
    if not (text.startswith(before) and text.endswith(after) and len(text) >= len(before) + len(after)):
        raise ValueError(f"row {row}: the prompt is not a single user message in the input tokenizer's chat template "
                         "(a system prompt or several turns?), so its messages cannot be recovered from the ids; set "
                         "data.return_raw_chat=true so the reward model gets the dataset's messages")
    return [{"role": "user", "content": text[len(before) : len(text) - len(after)]}]


def response_text(data: DataProto, row: int, input_tokenizer: Any) -> str:
    """The response of ``row`` decoded with the policy's tokenizer, its EOS text removed (the assistant's turn)."""
    responses = data.batch["responses"]
    valid = int(data.batch["attention_mask"][row, -responses.size(1):].sum())
    text = input_tokenizer.decode(responses[row, :valid].tolist(), skip_special_tokens=False)
    eos = input_tokenizer.eos_token
    return text.replace(eos, "") if eos else text


def retemplate(data: DataProto, input_tokenizer: Any, rm_tokenizer: Any, max_length: int | None) -> dict[str, torch.Tensor]:
    """input_ids / attention_mask / position_ids (right-padded) of every row in the reward model's chat format."""
    frame = None if "raw_prompt" in data.non_tensor_batch else _template_frame(input_tokenizer)
    rows: list[list[int]] = []
    for row in range(len(data)):
        chat = chat_messages(data, row, input_tokenizer, frame)
        chat.append({"role": "assistant", "content": response_text(data, row, input_tokenizer)})
        text = rm_tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
        ids = rm_tokenizer.encode(text, add_special_tokens=False)
        rows.append(ids[:max_length] if max_length else ids)  # upstream cuts from the right
    width = max(len(ids) for ids in rows)
    pad = rm_tokenizer.pad_token_id if rm_tokenizer.pad_token_id is not None else rm_tokenizer.eos_token_id
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, ids in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
        attention_mask[i, : len(ids)] = 1
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids}


def last_token_index(attention_mask: torch.Tensor) -> torch.Tensor:
    """(bs,) column of each row's last real token, for any padding side."""
    columns = torch.arange(attention_mask.size(1), device=attention_mask.device)
    return (attention_mask.long() * columns).argmax(dim=-1)


def response_score_index(data: DataProto) -> torch.Tensor:
    """(bs,) where each row's score goes in the (bs, response_length) rm_scores: its last real response token, as
    the rule reward places it; -1 for an empty response (upstream drops that score: the row gets 0)."""
    response_length = data.batch["responses"].size(1)
    valid = data.batch["attention_mask"][:, -response_length:].sum(-1)
    return valid.long() - 1


def reward_texts(data: DataProto, tokenizer: Any) -> tuple[list[str], list[str], list[Any]]:
    """(questions, answers, ground_truths) of every row: the content of the last user message of ``raw_prompt``
    ("" when none), the response decoded by ``tokenizer`` without special tokens, and ``reward_model["ground_truth"]``.
    The response is cut to its real tokens by the attention mask's response columns when the batch has one, so a
    pad id that is not a special token does not reach the text."""
    raw_prompts = data.non_tensor_batch.get("raw_prompt")
    reward_infos = data.non_tensor_batch.get("reward_model")
    if raw_prompts is None or reward_infos is None:
        missing = [key for key, value in (("raw_prompt", raw_prompts), ("reward_model", reward_infos)) if value is None]
        raise KeyError(f"the batch has no {' / '.join(missing)} column: a generative judge needs the dataset's chat "
                       "(data.return_raw_chat=true) and each row's reward_model.ground_truth")
    responses = data.batch["responses"]
    mask = data.batch.get("attention_mask", None)
    questions, answers, ground_truths = [], [], []
    for row in range(len(data)):
        messages = raw_prompts[row]
        if not isinstance(messages, (list, tuple, np.ndarray)):
            raise TypeError(f"raw_prompt of row {row} is a {type(messages).__name__}, expected a list of chat messages")
        questions.append(next((m["content"] for m in reversed(list(messages)) if m.get("role") == "user"), ""))
        ids = responses[row]
        if mask is not None:
            ids = ids[: int(mask[row, -responses.size(1):].sum())]
        answers.append(tokenizer.decode(ids.tolist(), skip_special_tokens=True))
        ground_truths.append(reward_infos[row]["ground_truth"])
    return questions, answers, ground_truths
