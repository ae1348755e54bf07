"""Tiny random Llama models and rollout-shaped batches for worker tests (no downloads, CPU, deterministic)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask, get_response_mask

VOCAB_SIZE = 128
PAD_ID = 0
EOS_ID = 2
PROMPT_LEN_DEFAULT = 6
RESPONSE_LEN_DEFAULT = 5


def tiny_llama_config(vocab_size: int = VOCAB_SIZE, **overrides) -> LlamaConfig:
    """hidden 32, 2 layers, 4 heads, tied embeddings, eager attention (deterministic and fast on CPU)."""
    kwargs = dict(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                  tie_word_embeddings=True, pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=1,
                  attention_dropout=0.0)
    kwargs.update(overrides)
    config = LlamaConfig(**kwargs)
    config._attn_implementation = "eager"
    return config


def tiny_llama(seed: int = 0, vocab_size: int = VOCAB_SIZE, **overrides) -> LlamaForCausalLM:
    """A random tiny causal LM in fp32; the same seed gives the same weights."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_llama_config(vocab_size, **overrides))
    return model.float()


def save_tiny_model_dir(folder) -> str:
    """tiny_llama() and the tiny tokenizer saved together as an HF folder; returns its path."""
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

    tiny_llama().save_pretrained(folder)
    build_tiny_tokenizer().save_pretrained(folder)
    return str(folder)


def left_padded_prompts(lengths: list[int], prompt_len: int, seed: int = 0,
                        vocab_size: int = VOCAB_SIZE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids) of random prompts, left-padded to ``prompt_len`` with PAD_ID.

    Token ids avoid PAD_ID and EOS_ID so a prompt never looks finished.
    """
    gen = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), prompt_len), PAD_ID, dtype=torch.long)
    mask = torch.zeros((len(lengths), prompt_len), dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, prompt_len - n:] = torch.randint(3, vocab_size, (n,), generator=gen)
        mask[row, prompt_len - n:] = 1
    return ids, mask, compute_position_id_with_mask(mask)


def rollout_batch(prompt_lengths: list[int], response_lengths: list[int], prompt_len: int = PROMPT_LEN_DEFAULT,
                  response_len: int = RESPONSE_LEN_DEFAULT, seed: int = 0, vocab_size: int = VOCAB_SIZE,
                  meta_info: dict | None = None) -> DataProto:
    """A batch shaped like the rollout's output: row i has a response of ``response_lengths[i]`` tokens,
    ending in EOS when shorter than ``response_len``; right-padded with PAD_ID."""
    prompts, prompt_mask, _ = left_padded_prompts(prompt_lengths, prompt_len, seed, vocab_size)
    gen = torch.Generator().manual_seed(seed + 1)
    responses = torch.full((len(prompt_lengths), response_len), PAD_ID, dtype=torch.long)
    for row, n in enumerate(response_lengths):
        responses[row, :n] = torch.randint(3, vocab_size, (n,), generator=gen)
        if n < response_len:
            responses[row, n - 1] = EOS_ID
    response_mask = get_response_mask(responses, EOS_ID, dtype=torch.long)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    tensors = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask,
    }
    meta = {"temperature": 1.0, "micro_batch_size": 2, "use_dynamic_bsz": False, "max_token_len": 64,
            "eos_token_id": EOS_ID, "pad_token_id": PAD_ID}
    meta.update(meta_info or {})
    return DataProto.from_dict(tensors=tensors, meta_info=meta)
