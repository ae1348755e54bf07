"""flash_varlen_attention's calling convention, on CPU: the layouts, causality, GQA and scale it hands torch's
varlen_attn under each torch's spelling (2.10 is_causal; 2.11 window_size; 2.12+ window_size, enable_gqa, scale).

The kernel itself needs a GPU (tests/gpu/test_varlen_gpu.py compares it with per-segment sdpa there). Here a
stand-in with the documented contract (packed (T, H, D) inputs, cumulative bounds, causal only when asked, kv heads
equal to query heads unless GQA is enabled) must give what causal sdpa per segment gives.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from verl.models import varlen_attention


def _segments_reference(q, k, v, lengths, scale):
    """(1, H, T, D) inputs -> (1, T, Hq, D), causal sdpa per segment with GQA."""
    outs = [F.scaled_dot_product_attention(a, b, c, is_causal=True, scale=scale, enable_gqa=True).transpose(1, 2)
            for a, b, c in zip(q.split(lengths, 2), k.split(lengths, 2), v.split(lengths, 2))]
    return torch.cat(outs, dim=1)


def _stand_in(spelling: str, calls: list):
    """A varlen_attn with the signature of one torch release; records the keywords it got."""

    def run(q, k, v, cu_q, cu_k, max_q, max_k, causal, gqa, scale):
        assert q.dim() == 3 and q.is_contiguous() and cu_q.dtype == torch.int32 and torch.equal(cu_q, cu_k)
        if not gqa:
            assert q.size(1) == k.size(1), "kv heads must equal query heads without enable_gqa"
        bounds = cu_q.tolist()
        lengths = [bounds[i + 1] - bounds[i] for i in range(len(bounds) - 1)]
        assert max(lengths) == max_q == max_k
        outs = [F.scaled_dot_product_attention(a.transpose(0, 1)[None], b.transpose(0, 1)[None],
                                               c.transpose(0, 1)[None], is_causal=causal, scale=scale,
                                               enable_gqa=gqa)[0].transpose(0, 1)
                for a, b, c in zip(q.split(lengths), k.split(lengths), v.split(lengths))]
        return torch.cat(outs)

    if spelling == "2.10":
        def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, return_aux=None):
            calls.append({"is_causal": is_causal})
            return run(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, False, None)
    elif spelling == "2.11":
        def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                        window_size=(-1, -1)):
            calls.append({"window_size": window_size, "scale": scale})
            return run(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, window_size == (-1, 0), False, scale)
    else:
        def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                        window_size=(-1, -1), enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
            calls.append({"window_size": window_size, "scale": scale, "enable_gqa": enable_gqa})
            return run(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, window_size == (-1, 0), enable_gqa,
                       scale)
    return varlen_attn


@pytest.mark.parametrize("spelling", ["2.10", "2.11", "2.13"])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_flash_varlen_call_equals_causal_sdpa_per_segment(monkeypatch, spelling, scale):
    import inspect

    calls: list = []
    fn = _stand_in(spelling, calls)
    params = inspect.signature(fn).parameters
    monkeypatch.setattr(varlen_attention, "_varlen_attn",
                        lambda: (fn, "window_size" in params, "enable_gqa" in params, "scale" in params))
    gen = torch.Generator().manual_seed(0)
    lengths = [5, 1, 7, 3]
    q = torch.randn(1, 6, sum(lengths), 8, generator=gen)
    k, v = (torch.randn(1, 2, sum(lengths), 8, generator=gen) for _ in range(2))  # GQA: 3 query heads per kv head
    cu = torch.tensor([0, 5, 6, 13, 16])
    got = varlen_attention.flash_varlen_attention(q, k, v, cu, max(lengths), scale)
    assert got.shape == (1, sum(lengths), 6, 8)
    assert torch.allclose(got, _segments_reference(q, k, v, lengths, scale), atol=1e-6)
    assert len(calls) == 1
    if spelling == "2.10":
        assert calls[0] == {"is_causal": True}  # the scale folded into the query instead
    else:
        assert calls[0]["window_size"] == (-1, 0) and calls[0]["scale"] == scale
    if spelling == "2.13":
        assert calls[0]["enable_gqa"] is True  # no copies of the kv heads


def test_flash_varlen_is_used_only_for_half_precision_on_cuda():
    assert not varlen_attention.uses_flash_varlen(torch.zeros(1, 2, 3, 4, dtype=torch.bfloat16))  # CPU
    assert not varlen_attention.uses_flash_varlen(torch.zeros(1, 2, 3, 4))
