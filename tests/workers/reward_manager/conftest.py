"""Rollout-shaped DataProto batches built from text with the tiny tokenizer."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from verl.protocol import DataProto

PROMPT_LEN = 12
RESPONSE_LEN = 16


@pytest.fixture
def tokenizer():
    return build_tiny_tokenizer()


def make_batch(tokenizer, samples, data_source="arithmetic", with_eos=True, extra=None):
    """samples: list of (prompt, response, ground_truth). Prompts left-padded, responses right-padded, like a
    rollout. Returns (DataProto, valid response lengths)."""
    pad = tokenizer.pad_token_id
    prompts, responses, masks, lengths = [], [], [], []
    for prompt, response, _ in samples:
        p = tokenizer.encode(prompt, add_special_tokens=False)
        r = tokenizer.encode(response, add_special_tokens=False) + ([tokenizer.eos_token_id] if with_eos else [])
        assert len(p) <= PROMPT_LEN and len(r) <= RESPONSE_LEN, (prompt, len(p), response, len(r))
        prompts.append([pad] * (PROMPT_LEN - len(p)) + p)
        responses.append(r + [pad] * (RESPONSE_LEN - len(r)))
        masks.append([0] * (PROMPT_LEN - len(p)) + [1] * len(p) + [1] * len(r) + [0] * (RESPONSE_LEN - len(r)))
        lengths.append(len(r))
    prompts_t, responses_t = torch.tensor(prompts), torch.tensor(responses)
    sources = data_source if isinstance(data_source, list) else [data_source] * len(samples)
    non_tensors = {
        "data_source": sources,
        "reward_model": [{"style": "rule", "ground_truth": truth} for _, _, truth in samples],
        "extra_info": [{"index": i} for i in range(len(samples))],
    }
    non_tensors.update(extra or {})
    data = DataProto.from_dict(
        tensors={
            "prompts": prompts_t,
            "responses": responses_t,
            "input_ids": torch.cat([prompts_t, responses_t], dim=1),
            "attention_mask": torch.tensor(masks),
        },
        non_tensors=non_tensors,
    )
    return data, lengths
