"""Packed-row attention on a GPU: torch's flash varlen kernel (what use_remove_padding runs in bf16 there) gives what
causal sdpa per segment gives, forward and gradients, with GQA and a non-default scale.

Marked ``gpu``: skipped with the reason where CUDA is absent (tests/conftest.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from verl.models import varlen_attention

pytestmark = pytest.mark.gpu


def _per_segment(q, k, v, lengths, scale):
    outs = [F.scaled_dot_product_attention(a, b, c, is_causal=True, scale=scale, enable_gqa=True).transpose(1, 2)
            for a, b, c in zip(q.split(lengths, 2), k.split(lengths, 2), v.split(lengths, 2))]
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("scale", [None, 0.1])
def test_flash_varlen_equals_per_segment_sdpa_in_bf16(scale):
    assert varlen_attention.uses_flash_varlen(torch.zeros(1, device="cuda", dtype=torch.bfloat16))
    gen = torch.Generator(device="cuda").manual_seed(0)
    lengths = [130, 1, 77, 256, 9]
    total = sum(lengths)
    make = lambda heads: torch.randn(1, heads, total, 64, device="cuda", generator=gen,  # noqa: E731
                                     dtype=torch.bfloat16, requires_grad=True)
    q, k, v = make(9), make(3), make(3)  # SmolLM2-135M's heads: 9 query, 3 kv
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], device="cuda", dtype=torch.int32)
    got = varlen_attention.flash_varlen_attention(q, k, v, cu, max(lengths), scale)
    want = _per_segment(q.float(), k.float(), v.float(), lengths, scale)
    assert got.shape == want.shape == (1, total, 9, 64) and got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max().item() < 2e-2  # bf16 inputs, fp32 reference
    grad = torch.randn(got.shape, device="cuda", generator=gen)
    got_grads = torch.autograd.grad(got.float(), (q, k, v), grad)
    want_grads = torch.autograd.grad(want, (q, k, v), grad)
    for name, a, b in zip("qkv", got_grads, want_grads):
        rel = (a.float() - b.float()).norm() / b.float().norm()
        assert rel < 2e-2, (name, rel.item())
