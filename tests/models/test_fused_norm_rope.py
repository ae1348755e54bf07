"""The fused RMSNorm / rotary embedding: hand-computed cases, finite differences, and HF's own modules as reference."""

from __future__ import annotations

import copy
import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.llama import modeling_llama

from tests.helpers.tiny_model import tiny_llama
from verl.models.fused_norm_rope import _reference, fuse_norm_and_rope, fused_apply_rotary_pos_emb, fused_rms_norm


def _hf_rope(q, k, cos, sin, unsqueeze_dim=1):
    """HF's formula, written out here: the module global may already point at the fused function."""
    def rotate_half(x):
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def _norm(hidden: int, eps: float, dtype=torch.float32, seed: int = 0) -> modeling_llama.LlamaRMSNorm:
    torch.manual_seed(seed)
    norm = modeling_llama.LlamaRMSNorm(hidden, eps=eps).to(dtype)
    norm.weight.data.uniform_(0.5, 1.5)
    return norm


def test_rms_norm_hand_computed():
    # x = (3, 4): mean square 12.5, so xhat = x / sqrt(12.5); for g = (1, 0):
    # dx = (g*w - xhat * mean(g*w*xhat)) / rms = ((1, 0) - xhat * 3 / (2 sqrt(12.5))) / sqrt(12.5)
    #    = (1 - 9/25, -12/25) / sqrt(12.5) = (0.64, -0.48) / sqrt(12.5);  dw = g * xhat = (3 / sqrt(12.5), 0)
    norm = modeling_llama.LlamaRMSNorm(2, eps=0.0)
    x = torch.tensor([[3.0, 4.0]], requires_grad=True)
    y = fused_rms_norm(norm, x)
    rms = math.sqrt(12.5)
    torch.testing.assert_close(y, torch.tensor([[3 / rms, 4 / rms]]))
    y.backward(torch.tensor([[1.0, 0.0]]))
    torch.testing.assert_close(x.grad, torch.tensor([[0.64 / rms, -0.48 / rms]]))
    torch.testing.assert_close(norm.weight.grad, torch.tensor([3 / rms, 0.0]))


def test_rms_norm_gradcheck():
    x = torch.randn(2, 3, 7, dtype=torch.float64, requires_grad=True)
    weight = torch.rand(7, dtype=torch.float64).add_(0.5).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, w: fused_rms_norm(SimpleNamespace(weight=w, variance_epsilon=1e-6), x), (x, weight))


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 17), hidden=st.sampled_from([1, 4, 33, 64]), eps=st.sampled_from([1e-6, 1e-5, 0.1]),
       seed=st.integers(0, 2**16))
def test_rms_norm_matches_hf(rows, hidden, eps, seed):
    norm = _norm(hidden, eps, seed=seed)
    x = torch.randn(2, rows, hidden, generator=torch.Generator().manual_seed(seed)) * 3
    g = torch.randn_like(x)
    x1 = x.clone().requires_grad_()
    norm(x1).backward(g)
    grads = x1.grad, norm.weight.grad.clone()
    norm.weight.grad = None
    x2 = x.clone().requires_grad_()
    y2 = fused_rms_norm(norm, x2)
    y2.backward(g)
    assert torch.equal(y2, norm(x))  # the forward runs HF's operations in HF's order
    torch.testing.assert_close(x2.grad, grads[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(norm.weight.grad, grads[1], rtol=1e-5, atol=1e-5)


def test_rms_norm_bf16_stays_close_to_float64():
    norm64 = _norm(64, 1e-5, torch.float64)
    norm16 = copy.deepcopy(norm64).to(torch.bfloat16)
    x = torch.randn(4, 9, 64, dtype=torch.float64)
    g = torch.randn_like(x)
    x64, x16 = x.clone().requires_grad_(), x.bfloat16().requires_grad_()
    norm64(x64).backward(g)
    y16 = fused_rms_norm(norm16, x16)
    y16.backward(g.bfloat16())
    assert y16.dtype == x16.grad.dtype == norm16.weight.grad.dtype == torch.bfloat16
    torch.testing.assert_close(x16.grad.double(), x64.grad, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(norm16.weight.grad.double(), norm64.weight.grad, rtol=2e-2, atol=5e-2)


def test_rope_hand_computed():
    # head_dim 2: (q1, q2) = (1, 0) rotated by theta is (cos theta, sin theta); the gradient rotates back by -theta
    theta = 0.3
    cos = torch.full((1, 1, 2), math.cos(theta))
    sin = torch.full((1, 1, 2), math.sin(theta))
    q = torch.tensor([[[[1.0, 0.0]]]], requires_grad=True)
    k = torch.tensor([[[[0.0, 2.0]]]], requires_grad=True)
    q_out, k_out = fused_apply_rotary_pos_emb(q, k, cos, sin)
    torch.testing.assert_close(q_out, torch.tensor([[[[math.cos(theta), math.sin(theta)]]]]))
    torch.testing.assert_close(k_out, torch.tensor([[[[-2 * math.sin(theta), 2 * math.cos(theta)]]]]))
    (q_out * torch.tensor([0.0, 1.0])).sum().backward()  # d q_out2 / d q = (sin, cos)
    torch.testing.assert_close(q.grad, torch.tensor([[[[math.sin(theta), math.cos(theta)]]]]))


@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_rope_matches_hf_and_finite_differences(unsqueeze_dim):
    gen = torch.Generator().manual_seed(0)
    seq, heads, kv_heads, dim = 5, 4, 2, 8
    angles = torch.randn(1, seq, dim, generator=gen, dtype=torch.float64)
    cos, sin = angles.cos(), angles.sin()
    if unsqueeze_dim == 1:  # (batch, heads, seq, dim) views of a (batch, seq, heads, dim) projection, as HF does
        q = torch.randn(1, seq, heads, dim, generator=gen, dtype=torch.float64).transpose(1, 2)
        k = torch.randn(1, seq, kv_heads, dim, generator=gen, dtype=torch.float64).transpose(1, 2)
    else:
        q = torch.randn(1, seq, heads, dim, generator=gen, dtype=torch.float64)
        k = torch.randn(1, seq, kv_heads, dim, generator=gen, dtype=torch.float64)
    q.requires_grad_()
    k.requires_grad_()
    for fused, reference in zip(fused_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim),
                                _hf_rope(q, k, cos, sin, unsqueeze_dim)):
        torch.testing.assert_close(fused, reference, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda a, b: fused_apply_rotary_pos_emb(a, b, cos, sin, unsqueeze_dim), (q, k))


def test_rope_with_a_learned_table_differentiates_cos_and_sin():
    angles = torch.randn(1, 3, 4, dtype=torch.float64)
    cos, sin = angles.cos().requires_grad_(), angles.sin().requires_grad_()
    q, k = torch.randn(1, 2, 3, 4, dtype=torch.float64), torch.randn(1, 1, 3, 4, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda c, s: fused_apply_rotary_pos_emb(q, k, c, s), (cos, sin))


def _logits_and_grads(model, ids):
    logits = model(ids).logits
    logits.pow(2).mean().backward()
    return logits.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_tiny_llama_same_logits_and_gradients(attn, monkeypatch):
    # another test may have fused the Llama module global already: the reference runs transformers' original
    monkeypatch.setattr(modeling_llama, "apply_rotary_pos_emb", _reference("apply_rotary_pos_emb"))
    plain = tiny_llama(seed=3, num_key_value_heads=2)
    plain.config._attn_implementation = attn
    fused = copy.deepcopy(plain)
    ids = torch.randint(3, 128, (3, 11), generator=torch.Generator().manual_seed(1))
    plain_logits, plain_grads = _logits_and_grads(plain, ids)
    counts = fuse_norm_and_rope(fused)
    assert counts == {"rms_norms": 5, "rope_modules": 1}  # 2 layers x 2 norms + the final norm
    assert modeling_llama.apply_rotary_pos_emb is fused_apply_rotary_pos_emb
    fused_logits, fused_grads = _logits_and_grads(fused, ids)
    torch.testing.assert_close(fused_logits, plain_logits, rtol=1e-6, atol=1e-6)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)
    assert fuse_norm_and_rope(fused) == counts  # idempotent


def test_lookalike_models_are_left_alone():
    from transformers import CohereConfig, CohereForCausalLM, GemmaConfig, GemmaForCausalLM

    small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=8)
    gemma = GemmaForCausalLM(GemmaConfig(**small))  # RMSNorm scales by (1 + w): a different formula
    assert fuse_norm_and_rope(gemma)["rms_norms"] == 0
    assert not any("forward" in vars(m) for m in gemma.modules() if type(m).__name__.endswith("RMSNorm"))
    cohere = CohereForCausalLM(CohereConfig(**small))  # interleaved rotary embedding and a LayerNorm
    assert fuse_norm_and_rope(cohere) == {"rms_norms": 0, "rope_modules": 0}
    from transformers.models.cohere import modeling_cohere

    assert modeling_cohere.apply_rotary_pos_emb is not fused_apply_rotary_pos_emb


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("VERL_FUSED_NORM_ROPE", "0")
    model = tiny_llama()
    assert fuse_norm_and_rope(model) == {"rms_norms": 0, "rope_modules": 0}
    assert not any("forward" in vars(m) for m in model.modules())


def test_load_causal_lm_fuses(tmp_path):
    from verl.models.loader import load_causal_lm
    from verl.trainer.config import HFModelConfig

    tiny_llama().save_pretrained(tmp_path / "tiny")
    model, _ = load_causal_lm(HFModelConfig(path=str(tmp_path / "tiny"), enable_gradient_checkpointing=False),
                              "actor_rollout_ref.model")
    norms = [m for m in model.modules() if isinstance(m, modeling_llama.LlamaRMSNorm)]
    assert norms and all(vars(m)["forward"].__func__ is fused_rms_norm for m in norms)
    assert modeling_llama.apply_rotary_pos_emb is fused_apply_rotary_pos_emb


def test_gradient_checkpointing_recomputes_the_fused_forward(monkeypatch):
    monkeypatch.setattr(modeling_llama, "apply_rotary_pos_emb", _reference("apply_rotary_pos_emb"))
    plain = tiny_llama(seed=5, num_key_value_heads=2)
    fused = copy.deepcopy(plain)
    ids = torch.randint(3, 128, (2, 9), generator=torch.Generator().manual_seed(2))
    _, plain_grads = _logits_and_grads(plain, ids)
    fuse_norm_and_rope(fused)
    fused.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    fused.train()
    _, fused_grads = _logits_and_grads(fused, ids)
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)
