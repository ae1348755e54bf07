"""Upstream's ``verl.utils.model`` helpers that tests and recipes import: HF config overrides and random masks.

Model loading itself lives in ``verl.models``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["create_random_mask", "update_model_config"]


def update_model_config(module_config: Any, override_config_kwargs: Mapping[str, Any]) -> None:
    """Set each key of ``override_config_kwargs`` on ``module_config`` (an HF config), in place.

    A dict value updates the sub-config of that name key by key (``{"text_config": {"hidden_size": 8}}``) instead
    of replacing it.
    """
    for key, value in override_config_kwargs.items():
        if isinstance(value, Mapping):
            update_model_config(getattr(module_config, key), value)
        else:
            setattr(module_config, key, value)


def create_random_mask(input_ids: torch.Tensor, max_ratio_of_valid_token: float, max_ratio_of_left_padding: float,
                       min_ratio_of_valid_token: float = 0, generator: torch.Generator | None = None) -> torch.Tensor:
    """A random int64 attention mask shaped like ``input_ids`` (batch, seq): left padding, valid tokens, right padding.

    Per row: left padding in [0, seq * max_ratio_of_left_padding], then a run of valid tokens whose length is in
    [max(1, seq * min_ratio_of_valid_token), seq * max_ratio_of_valid_token], then zeros. For tests of padding-aware
    code. Arguments out of range fail an assertion, as upstream.
    """
    assert 0 < max_ratio_of_valid_token <= 1.0, f"max_ratio_of_valid_token={max_ratio_of_valid_token} not in (0, 1]"
    assert 0 <= max_ratio_of_left_padding < 1.0, f"max_ratio_of_left_padding={max_ratio_of_left_padding} not in [0, 1)"
    assert min_ratio_of_valid_token <= max_ratio_of_valid_token, "min_ratio_of_valid_token > max_ratio_of_valid_token"
    batch_size, seq_len = input_ids.shape
    max_valid = int(seq_len * max_ratio_of_valid_token)
    min_valid = max(1, int(seq_len * min_ratio_of_valid_token))
    max_left = int(seq_len * max_ratio_of_left_padding)
    assert max_valid > 0 and max_valid + max_left <= seq_len, (
        f"{max_valid} valid tokens after up to {max_left} left padding do not fit {seq_len} positions"
    )
    left = torch.randint(0, max_left + 1, (batch_size, 1), generator=generator)
    valid = torch.randint(min_valid, max_valid + 1, (batch_size, 1), generator=generator)
    positions = torch.arange(seq_len).unsqueeze(0)
    mask = (positions >= left) & (positions < left + valid)
    return mask.to(device=input_ids.device, dtype=torch.int64)
