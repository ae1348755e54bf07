"""Upstream's ``verl.utils.tokenizer``: ``hf_tokenizer`` loads an HF tokenizer the way the trainer needs it.

``hf_tokenizer(name_or_path, correct_pad_token=True, correct_gemma2=True, **kwargs)`` is
``AutoTokenizer.from_pretrained(name_or_path, **kwargs)`` with two fixes: a tokenizer without a pad token pads with
its EOS token (``set_pad_token_id``; generation and batching need a pad id), and gemma-2-2b-it ends turns with
``<end_of_turn>`` (id 107), not its configured EOS. Each fix is announced with a warning.
"""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["hf_tokenizer", "set_pad_token_id"]

_GEMMA2_IT = "gemma-2-2b-it"
_GEMMA2_END_OF_TURN = ("<end_of_turn>", 107)


def set_pad_token_id(tokenizer: Any) -> None:
    """Pad with the EOS token when the tokenizer has no pad token (id or text)."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token_id = tokenizer.eos_token_id
        warnings.warn(f"the tokenizer has no pad_token_id; padding with the EOS id {tokenizer.eos_token_id}",
                      stacklevel=2)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
        warnings.warn(f"the tokenizer has no pad_token; padding with the EOS token {tokenizer.eos_token!r}",
                      stacklevel=2)


def hf_tokenizer(name_or_path: Any, correct_pad_token: bool = True, correct_gemma2: bool = True, **kwargs: Any):
    """An HF tokenizer from a hub name or a folder (``kwargs`` go to ``AutoTokenizer.from_pretrained``)."""
    from transformers import AutoTokenizer

    if correct_gemma2 and isinstance(name_or_path, str) and _GEMMA2_IT in name_or_path:
        # gemma-2-2b-it's configured EOS is not what ends its turns, so generation would run past them
        eos_token, eos_token_id = _GEMMA2_END_OF_TURN
        warnings.warn(f"{_GEMMA2_IT}: using {eos_token!r} (id {eos_token_id}) as the EOS token", stacklevel=2)
        kwargs["eos_token"] = eos_token
        kwargs["eos_token_id"] = eos_token_id
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, **kwargs)
    if correct_pad_token:
        set_pad_token_id(tokenizer)
    return tokenizer
