"""Upstream verl's MFU accounting from an HF config alone (``FlopsCounter(config).estimate_flops``).

For a model family, training FLOPs of a batch of sequences with ``L_i`` real tokens are

    6 * (layers * per-layer weights + 2 * vocab * hidden) * sum(L_i)       every weight incl. embedding and LM head
  + 12 * heads * head_dim * sum over layers and sequences of L_i * span    attention as a full square, x3 backward

where ``span`` is ``L_i``, or ``min(L_i, window)`` on a sliding-window layer. Per-layer weights are the attention
projections (q, k, v, o) plus the MLP: 3 matrices for SwiGLU/GeGLU, 2 for Apertus' xIELU, the routed top-k experts
and the router for MoE, and DeepSeek-V3's low-rank (MLA) projections. These are upstream's conventions, kept so MFU
figures compare with theirs; ``FlopsCounter.training_flops`` counts what a causal kernel actually does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["DENSE_TYPES", "FAMILIES", "layer_weights", "attention_span_sum", "attention_width", "estimate_training_flops"]


def _head_dim(c: Any) -> int:
    return int(getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads)


def _attn_linear(c: Any) -> int:
    """q, k, v and o projections of one layer (grouped k/v heads)."""
    hd = _head_dim(c)
    kv = int(getattr(c, "num_key_value_heads", None) or c.num_attention_heads)
    return c.hidden_size * (2 * c.num_attention_heads * hd + 2 * kv * hd)


def _dense(c: Any) -> list[int]:
    return [_attn_linear(c) + 3 * c.hidden_size * c.intermediate_size] * c.num_hidden_layers


def _qwen_moe(c: Any) -> list[int]:
    mlp = 3 * c.hidden_size * c.num_experts_per_tok * c.moe_intermediate_size + c.hidden_size * c.num_experts
    return [_attn_linear(c) + mlp] * c.num_hidden_layers


def _gpt_oss(c: Any) -> list[int]:
    mlp = 3 * c.hidden_size * c.intermediate_size * c.num_experts_per_tok + c.hidden_size * c.num_local_experts
    return [_attn_linear(c) + mlp] * c.num_hidden_layers


def _apertus(c: Any) -> list[int]:
    kv = int(getattr(c, "num_key_value_heads", None) or c.num_attention_heads)
    qk_norm = c.hidden_size + kv * _head_dim(c)  # Apertus normalises q and k (qk_norm defaults to true)
    return [_attn_linear(c) + 2 * c.hidden_size * c.intermediate_size + qk_norm] * c.num_hidden_layers


def _mla(c: Any) -> int:
    """DeepSeek-V3's multi-head latent attention projections of one layer."""
    h, heads = c.hidden_size, c.num_attention_heads
    q_dim = c.qk_nope_head_dim + c.qk_rope_head_dim
    q = h * heads * q_dim if c.q_lora_rank is None else h * c.q_lora_rank + heads * q_dim * c.q_lora_rank
    kv_down = h * (c.kv_lora_rank + c.qk_rope_head_dim)
    kv_up = heads * (c.qk_nope_head_dim + c.v_head_dim) * c.kv_lora_rank
    return q + kv_down + kv_up + heads * c.v_head_dim * h


def _deepseek_v3(c: Any) -> list[int]:
    h = c.hidden_size
    attn = _mla(c)
    dense = attn + 3 * h * c.intermediate_size
    experts = c.num_experts_per_tok + c.n_shared_experts
    moe = attn + h * c.n_routed_experts + 3 * h * c.moe_intermediate_size * experts
    k = c.first_k_dense_replace
    return [dense] * k + [moe] * (c.num_hidden_layers - k)


DENSE_TYPES = ("qwen2", "llama", "qwen2_vl", "qwen2_5_vl", "qwen3", "qwen3_vl", "minicpmv", "minicpmo", "mistral",
               "gemma3_text", "seed_oss", "glm4v")
FAMILIES: dict[str, Callable[[Any], list[int]]] = {
    **dict.fromkeys(DENSE_TYPES, _dense),
    **dict.fromkeys(("qwen2_moe", "qwen3_moe", "qwen3_vl_moe"), _qwen_moe),
    "deepseek_v3": _deepseek_v3,
    "apertus": _apertus,
    "gpt_oss": _gpt_oss,
}


def layer_weights(config: Any) -> list[int] | None:
    """Weights each token meets in each decoder layer (embeddings excluded), or None for an unknown model_type."""
    family = FAMILIES.get(getattr(config, "model_type", None))
    return None if family is None else [int(n) for n in family(config)]


def _windows(c: Any) -> list[int | None]:
    """Each layer's attention window (None: full attention)."""
    layers = c.num_hidden_layers
    types = getattr(c, "layer_types", None)
    if c.model_type == "gemma3_text":
        window = getattr(c, "sliding_window", 1024)
        pattern = getattr(c, "sliding_window_pattern", 6)
        if types is None and window is not None and pattern is not None:  # every pattern-th layer is global
            types = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)]
    elif c.model_type == "gpt_oss":
        window = getattr(c, "sliding_window", 128)
    else:
        return [None] * layers
    if not types:
        return [None] * layers
    return [window if t == "sliding_attention" and window else None for t in list(types)[:layers]]


def attention_span_sum(config: Any, seqlens: Sequence[int]) -> int:
    """Sum over layers and sequences of L * (the keys each query sees, as a full square)."""
    return sum(n * (n if w is None else min(n, w)) for w in _windows(config) for n in seqlens)


def attention_width(config: Any) -> int:
    """heads x the query/key head size the attention scores are computed with."""
    if config.model_type == "deepseek_v3":
        return config.num_attention_heads * (config.qk_nope_head_dim + config.qk_rope_head_dim)
    return config.num_attention_heads * _head_dim(config)


def estimate_training_flops(config: Any, seqlens: Sequence[int]) -> float | None:
    """Upstream's training FLOPs of one pass over ``seqlens`` (module docstring); None for an unknown model_type."""
    weights = layer_weights(config)
    if weights is None:
        return None
    lengths = [int(n) for n in seqlens]
    dense = sum(weights) + 2 * config.vocab_size * config.hidden_size
    return float(6 * dense * sum(lengths) + 12 * attention_width(config) * attention_span_sum(config, lengths))
