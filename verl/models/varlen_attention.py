"""Attention over a packed row without cross-sample work, for HF models on any device.

With ``attention_mask=None`` and restarting position ids, transformers' sdpa/eager attention is correct on a packed
row but builds a (T, T) block-diagonal mask and computes every query against every key of the row: for T packed
tokens in segments of length L_i that is T^2 instead of sum(L_i^2) — on a 4k-token micro-batch of ~250-token
samples, 16x the attention work, more than the padding it removed. So this module registers an attention
implementation that runs each segment alone (``cu_seq_lens_q``, passed through the model's forward kwargs): on a
GPU in half precision in torch's flash varlen kernel (``torch.nn.attention.varlen``), one call per layer; on CPU
(where that module has no kernel) and in fp32, causal sdpa per segment; and, for
every other call (padded forwards, generation with a cache), delegates unchanged to the implementation the model
was loaded with — the same module serves the rollout and the padded path bit for bit.

``enable_varlen_attention(model)`` switches a model over (idempotent); ``packed_forward()`` marks a forward whose
attention_mask is None because it is packed, so no (T, T) mask is built for it.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import sys
from collections.abc import Iterator

import torch
import torch.nn.functional as F

from verl.utils.ulysses import active_ulysses_group, gather_heads_scatter_seq, gather_seq_scatter_heads

__all__ = ["enable_varlen_attention", "packed_forward", "varlen_implementation_name", "VARLEN_PREFIX",
           "ULYSSES_GROUP_KWARG"]

VARLEN_PREFIX = "verl_varlen_"
ULYSSES_GROUP_KWARG = "verl_ulysses_group"  # the model forward kwarg that carries the SP group to the attention
# Implementations that already run packed rows per segment from the position ids / cu_seqlens.
_NATIVE_VARLEN = ("flash_attention_2", "flash_attention_3", "flash_attention_4")
_in_packed_forward: contextvars.ContextVar[bool] = contextvars.ContextVar("verl_in_packed_forward", default=False)


@contextlib.contextmanager
def packed_forward() -> Iterator[None]:
    """Around a forward on a packed row (attention_mask None, cu_seq_lens_* kwargs): skip the (T, T) mask."""
    token = _in_packed_forward.set(True)
    try:
        yield
    finally:
        _in_packed_forward.reset(token)


def _base_attention(base: str, module: torch.nn.Module):
    if base == "eager":  # each model file defines its own eager function (softcapping, sinks, ...)
        eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
        if eager is None:
            raise RuntimeError(f"{type(module).__name__}: no eager_attention_forward in {type(module).__module__}; "
                               f"load the model with attn_implementation=sdpa to use use_remove_padding")
        return eager
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS[base]


def _segment_lengths(cu_seqlens: torch.Tensor) -> list[int]:
    bounds = cu_seqlens.tolist()
    return [bounds[i + 1] - bounds[i] for i in range(len(bounds) - 1)]


def _check_supported(module: torch.nn.Module, max_len: int, kwargs: dict) -> None:
    window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    if window and max_len > int(window):
        raise NotImplementedError(f"{type(module).__name__} uses a sliding window of {window} tokens, shorter than a "
                                  f"packed sample ({max_len}); set use_remove_padding=false for this model")
    if kwargs.get("softcap") or getattr(module, "attn_logit_softcapping", None) or hasattr(module, "sinks"):
        raise NotImplementedError(f"{type(module).__name__} uses logit softcapping / attention sinks, which the "
                                  f"per-segment sdpa does not implement; set use_remove_padding=false for this model")


def _varlen_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    scaling: float | None, dropout: float, cu_seqlens: torch.Tensor,
                    max_len: int | None = None) -> tuple[torch.Tensor, None]:
    """query (1, Hq, T, D), key/value (1, Hkv, T, D) -> (1, T, Hq, D), causal within each segment only."""
    if query.size(0) != 1:
        raise ValueError(f"varlen attention expects one packed row, got a batch of {query.size(0)}")
    dropout_p = dropout if module.training else 0.0
    if max_len and dropout_p == 0.0 and uses_flash_varlen(query):
        return flash_varlen_attention(query, key, value, cu_seqlens, int(max_len), scaling), None
    lengths = _segment_lengths(cu_seqlens)
    if sum(lengths) != query.size(2):
        raise ValueError(f"cu_seq_lens_q covers {sum(lengths)} tokens but the packed row has {query.size(2)}")
    gqa = query.size(1) != key.size(1)
    # split, not slicing: the backward of one split is one concatenation, while every slice's backward would
    # zero-fill a full-size gradient (segments x T work per layer)
    # each segment's output transposed to (1, L, Hq, D) before the concatenation: one copy into the layout the
    # output projection reads, not a concatenation and then a transposing copy
    out_dtype = query.dtype
    if _upcast_for_backward(query):
        query, key, value = query.float(), key.float(), value.float()
    outputs = [F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling, dropout_p=dropout_p,
                                              enable_gqa=gqa).transpose(1, 2)
               for q, k, v in zip(query.split(lengths, dim=2), key.split(lengths, dim=2), value.split(lengths, dim=2))
               if q.size(2) > 0]
    return torch.cat(outputs, dim=1).to(out_dtype), None


def uses_flash_varlen(query: torch.Tensor) -> bool:
    """Whether a packed row's attention runs in torch's flash varlen kernel: CUDA, half precision, and a torch that
    has ``torch.nn.attention.varlen``. Elsewhere (CPU, fp32) causal sdpa runs per segment: on a GPU that loop is a
    launch per segment per layer, and reading the segment lengths is a host sync per layer."""
    return query.is_cuda and query.dtype in (torch.bfloat16, torch.float16) and _varlen_attn() is not None


@functools.cache
def _varlen_attn():
    """torch's varlen_attn and the keywords this torch spells causality, GQA and scale with (2.10: is_causal;
    2.11: window_size; 2.12+: window_size, enable_gqa), or None without it."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    return varlen_attn, "window_size" in params, "enable_gqa" in params, "scale" in params


def flash_varlen_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, cu_seqlens: torch.Tensor,
                           max_len: int, scaling: float | None) -> torch.Tensor:
    """Causal attention within each segment of one packed row in one kernel (forward and backward):
    query (1, Hq, T, D), key/value (1, Hkv, T, D) -> (1, T, Hq, D). No host sync: the segment bounds stay on the
    device and ``max_len`` comes from the packing."""
    varlen_attn, has_window, has_gqa, has_scale = _varlen_attn()
    q, k, v = (t[0].transpose(0, 1).contiguous() for t in (query, key, value))  # (T, H, D)
    kwargs: dict = {"window_size": (-1, 0)} if has_window else {"is_causal": True}
    if q.size(1) != k.size(1):
        if has_gqa:
            kwargs["enable_gqa"] = True
        else:
            groups = q.size(1) // k.size(1)
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    default_scale = q.size(-1) ** -0.5
    if scaling is not None and has_scale:
        kwargs["scale"] = scaling
    elif scaling is not None and scaling != default_scale:
        q = q * (scaling / default_scale)
    cu = cu_seqlens.to(device=q.device, dtype=torch.int32)
    out = varlen_attn(q, k, v, cu, cu, max_len, max_len, **kwargs)
    return out.unsqueeze(0)


def _upcast_for_backward(query: torch.Tensor) -> bool:
    """Whether to run a training forward's attention core in fp32 on CPU.

    torch's CPU flash-attention kernel has a slow reduced-precision backward: on segments of ~160 tokens (9 heads
    of 64, GQA 3) it measured 26 ms in bf16 against 14 ms in fp32 for the same work, while the forward costs about
    the same either way (docs/performance.md). The casts are cheap next to that, and fp32 attention is at least as
    accurate. No-grad forwards (log-probs, generation) keep the fast bf16 forward.
    """
    return (query.device.type == "cpu" and query.dtype in (torch.bfloat16, torch.float16)
            and torch.is_grad_enabled() and query.requires_grad)


def _sequence_parallel_attention(base: str, module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                                 value: torch.Tensor, dropout: float, scaling: float | None, cu_seqlens: torch.Tensor,
                                 kwargs: dict, group) -> tuple[torch.Tensor, None]:
    """Ulysses: this rank's T/sp tokens of all heads -> all T tokens of H/sp heads, attention, and back.

    query (1, Hq, T/sp, D), key/value (1, Hkv, T/sp, D) -> (1, T/sp, Hq, D), the layout the output projection reads.
    """
    sp = torch.distributed.get_world_size(group)
    num_q, num_kv = query.size(1), key.size(1)
    if num_q % sp:
        raise NotImplementedError(f"{type(module).__name__} has {num_q} attention heads, not divisible by "
                                  f"ulysses_sequence_parallel_size={sp}; pick an sp that divides the head count")
    if num_kv % sp:  # fewer kv heads than ranks: give every query head its own copy, which any sp dividing Hq splits
        key = key.repeat_interleave(num_q // num_kv, dim=1)
        value = value.repeat_interleave(num_q // num_kv, dim=1)
    query, key, value = (gather_seq_scatter_heads(t, seq_dim=2, head_dim=1, group=group) for t in (query, key, value))
    if base in _NATIVE_VARLEN:
        out, _ = _base_attention(base, module)(module, query, key, value, None, dropout=dropout, scaling=scaling,
                                               **kwargs)
    else:
        _check_supported(module, int(kwargs.get("max_length_q") or query.size(2)), kwargs)
        out, _ = _varlen_forward(module, query, key, value, scaling, dropout, cu_seqlens, kwargs.get("max_length_q"))
    return gather_heads_scatter_seq(out, head_dim=2, seq_dim=1, group=group), None


def _make_attention(base: str):
    def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                  **kwargs):
        if getattr(module, "is_causal", True) is False:  # a vision encoder's: its own chunks, not a packed text row
            return _base_attention(base, module)(module, query, key, value, attention_mask, dropout=dropout,
                                                 scaling=scaling, **kwargs)
        cu_seqlens = kwargs.get("cu_seq_lens_q")
        # from the forward's kwargs too: a gradient-checkpointing recompute runs in the backward, outside the context
        group = kwargs.pop(ULYSSES_GROUP_KWARG, None) or active_ulysses_group()
        if group is not None:
            if cu_seqlens is None or attention_mask is not None or kwargs.get("past_key_values") is not None:
                raise RuntimeError(f"{type(module).__name__}: ulysses_sequence_parallel_size > 1 runs only on packed "
                                   "rows; set use_remove_padding=true")
            return _sequence_parallel_attention(base, module, query, key, value, dropout, scaling, cu_seqlens,
                                                kwargs, group)
        if base in _NATIVE_VARLEN:
            return _base_attention(base, module)(module, query, key, value, attention_mask, dropout=dropout,
                                                 scaling=scaling, **kwargs)
        if cu_seqlens is None or attention_mask is not None or kwargs.get("past_key_values") is not None:
            if _in_packed_forward.get() and attention_mask is None:
                raise RuntimeError(f"{type(module).__name__} got a packed row without cu_seq_lens_q: this model does "
                                   "not pass forward kwargs to its attention; set use_remove_padding=false")
            return _base_attention(base, module)(module, query, key, value, attention_mask, dropout=dropout,
                                                 scaling=scaling, **kwargs)
        _check_supported(module, int(kwargs.get("max_length_q") or query.size(2)), kwargs)
        return _varlen_forward(module, query, key, value, scaling, dropout, cu_seqlens, kwargs.get("max_length_q"))

    attention.__name__ = f"{VARLEN_PREFIX}{base}_attention"
    return attention


def _make_mask(base: str):
    def mask(*args, **kwargs):
        if kwargs.get("attention_mask") is None and _in_packed_forward.get():
            return None  # the attention works per segment; a (T, T) mask would only cost memory and time
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

        return ALL_MASK_ATTENTION_FUNCTIONS[base](*args, **kwargs)

    return mask


def varlen_implementation_name(base: str) -> str:
    """Register (once) and return the varlen implementation wrapping ``base`` ('sdpa', 'eager', ...)."""
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    name = f"{VARLEN_PREFIX}{base}"
    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, _make_attention(base))
        AttentionMaskInterface.register(name, _make_mask(base))
    return name


def enable_varlen_attention(model: torch.nn.Module, sequence_parallel: bool = False) -> str:
    """Switch ``model`` (an HF model, possibly peft- or FSDP-wrapped) to per-segment attention on packed rows.

    Returns the implementation now in use. Flash attention already handles packed rows and is left alone, unless
    ``sequence_parallel`` (Ulysses), which needs the head all-to-all around it.
    """
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        raise TypeError(f"use_remove_padding needs a transformers model with a config; got {type(model).__name__}")
    base = config._attn_implementation or "sdpa"
    if base.startswith(VARLEN_PREFIX) or (base in _NATIVE_VARLEN and not sequence_parallel):
        return base
    config._attn_implementation = varlen_implementation_name(base)
    return config._attn_implementation
