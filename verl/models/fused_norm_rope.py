"""RMSNorm and rotary embeddings with hand-written backwards, for HF Llama-family models on any device.

Autograd's graph for HF's RMSNorm (pow, mean, add, rsqrt, mul, mul) and rotary embedding (slices, neg, cat, mul,
add) runs about ten memory-bound passes over the activations per call, plus zero-filled slice gradients; on a CPU
these are a tenth of a training step. The functions here compute the same forward and write each gradient in about
half the passes: RMSNorm keeps the normalised input and 1/rms (d/dx = rstd * (g*w - x̂ * mean(g*w * x̂))); the
rotary embedding's backward is the same rotation by -θ (g*cos + [g2*sin2, -g1*sin1]).

``fuse_norm_and_rope(model)`` switches a loaded model over where its code is HF's Llama formula, checked by comparing
bytecode with transformers' Llama functions, so variants that look alike but differ (Gemma's 1 + w norm, interleaved
or partial rotary embeddings) are left alone:
- RMSNorm modules get an instance ``forward`` (the class and every other model in the process stay as they are);
- a modeling module whose ``apply_rotary_pos_emb`` and ``rotate_half`` are Llama's gets the fused function in their
  place (a module global, as the attention looks it up; the forward it computes is the same, so every user of that
  module gets the same numbers).
``VERL_FUSED_NORM_ROPE=0`` turns it off.
"""

from __future__ import annotations

import inspect
import logging
import os
import sys
import types

import torch

__all__ = ["fuse_norm_and_rope", "fused_rms_norm", "fused_rms_norm_recompute", "fused_apply_rotary_pos_emb"]

logger = logging.getLogger(__name__)


class _RMSNorm(torch.autograd.Function):
    """weight * (x * rsqrt(mean(x^2) + eps)) with the normalisation in float32, as HF's LlamaRMSNorm.

    float64 stays float64 (HF rounds it through float32): a float64 model is asking for the precision.
    ``keep_input``: keep x rather than the float32 x̂ and recompute x̂ = x * rstd in the backward (one pass, bitwise the
    forward's x̂), so a bf16 model keeps half the bytes per norm: selective checkpointing's norm
    (verl.models.selective_recompute).
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float, keep_input: bool = False) -> torch.Tensor:
        xf = x.to(torch.float64 if x.dtype == torch.float64 else torch.float32)
        rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        xhat = xf * rstd
        ctx.save_for_backward(x if keep_input else xhat, weight, rstd)
        ctx.keep_input = keep_input
        ctx.input_dtype = x.dtype
        return weight * xhat.to(x.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None, None]:
        kept, weight, rstd = ctx.saved_tensors
        xhat = kept.to(rstd.dtype) * rstd if ctx.keep_input else kept
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad * xhat).reshape(-1, xhat.shape[-1]).sum(0).to(weight.dtype)
        if not ctx.needs_input_grad[0]:
            return None, grad_weight, None, None
        grad_xhat = (grad * weight).to(xhat.dtype)
        # d xhat_i / d x_j = rstd * (delta_ij - xhat_i * xhat_j / H)
        mean_dot = torch.linalg.vecdot(grad_xhat, xhat, dim=-1).unsqueeze(-1).mul_(1.0 / xhat.shape[-1])
        grad_x = torch.addcmul(grad_xhat, xhat, mean_dot, value=-1.0).mul_(rstd)
        return grad_x.to(ctx.input_dtype), grad_weight, None, None


def fused_rms_norm(module: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    """A Llama-style RMSNorm module's forward (``weight``, ``variance_epsilon``) through the fused function."""
    return _RMSNorm.apply(hidden_states, module.weight, module.variance_epsilon)


def fused_rms_norm_recompute(module: torch.nn.Module, hidden_states: torch.Tensor) -> torch.Tensor:
    """fused_rms_norm keeping the input rather than the normalised input (same forward and gradients)."""
    return _RMSNorm.apply(hidden_states, module.weight, module.variance_epsilon, True)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, inverse: bool) -> torch.Tensor:
    """x*cos + [-x2, x1]*sin (inverse: x*cos + [x2, -x1]*sin, i.e. by -θ) without rotate_half's copies."""
    half = x.shape[-1] // 2
    out = x * cos
    sign = 1.0 if inverse else -1.0
    out[..., :half].addcmul_(x[..., half:], sin[..., half:] if inverse else sin[..., :half], value=sign)
    out[..., half:].addcmul_(x[..., :half], sin[..., :half] if inverse else sin[..., half:], value=-sign)
    return out


class _Rope(torch.autograd.Function):
    """HF's rotary embedding of q and k; the backward rotates the gradients back (cos/sin take no gradient)."""

    @staticmethod
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        ctx.save_for_backward(cos, sin)
        return _rotate(q, cos, sin, inverse=False), _rotate(k, cos, sin, inverse=False)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_q: torch.Tensor | None, grad_k: torch.Tensor | None):
        cos, sin = ctx.saved_tensors
        return (None if grad_q is None else _rotate(grad_q, cos, sin, inverse=True),
                None if grad_k is None else _rotate(grad_k, cos, sin, inverse=True), None, None)


def fused_apply_rotary_pos_emb(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                               unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Drop-in for transformers' Llama ``apply_rotary_pos_emb`` (same signature, same forward)."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    if cos.requires_grad or sin.requires_grad:  # a learned rotary table: let autograd differentiate it too
        return _rotate(q, cos, sin, inverse=False), _rotate(k, cos, sin, inverse=False)
    return _Rope.apply(q, k, cos, sin)


_REFERENCE: dict[str, object] = {}


def _reference(name: str):
    """transformers' Llama originals, captured before this module replaces any of them."""
    if not _REFERENCE:
        from transformers.models.llama import modeling_llama

        _REFERENCE.update(apply_rotary_pos_emb=modeling_llama.apply_rotary_pos_emb,
                          rotate_half=modeling_llama.rotate_half,
                          rms_norm_forward=modeling_llama.LlamaRMSNorm.forward)
    return _REFERENCE[name]


def _same_code(fn, reference) -> bool:
    fn = inspect.unwrap(fn) if callable(fn) else fn
    reference = inspect.unwrap(reference)
    a, b = getattr(fn, "__code__", None), getattr(reference, "__code__", None)
    if a is None or b is None:
        return False
    return (a.co_code, a.co_consts, a.co_names) == (b.co_code, b.co_consts, b.co_names)


def _is_llama_rms_norm(module: torch.nn.Module) -> bool:
    forward = type(module).forward
    return (_same_code(forward, _reference("rms_norm_forward"))
            and isinstance(getattr(module, "weight", None), torch.Tensor)
            and isinstance(getattr(module, "variance_epsilon", None), float))


def _patch_rope(modeling: types.ModuleType) -> bool:
    current = getattr(modeling, "apply_rotary_pos_emb", None)
    if current is fused_apply_rotary_pos_emb:
        return True
    if current is None or not (_same_code(current, _reference("apply_rotary_pos_emb"))
                               and _same_code(getattr(modeling, "rotate_half", None), _reference("rotate_half"))):
        return False
    def parameters(fn):
        return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]

    if parameters(inspect.unwrap(current)) != parameters(fused_apply_rotary_pos_emb):
        return False
    modeling.apply_rotary_pos_emb = fused_apply_rotary_pos_emb
    return True


def fuse_norm_and_rope(model: torch.nn.Module) -> dict[str, int]:
    """Switch ``model``'s Llama-formula RMSNorms and rotary embeddings to the fused functions (idempotent).

    Call before FSDP wrapping or after, either works. Returns how many norms and modeling modules were switched.
    """
    if os.environ.get("VERL_FUSED_NORM_ROPE", "1") == "0":
        return {"rms_norms": 0, "rope_modules": 0}
    norms, rope_modules, seen = 0, 0, set()
    for module in model.modules():
        if _is_llama_rms_norm(module):
            if "forward" not in vars(module):  # an instance forward someone else set stays
                module.forward = types.MethodType(fused_rms_norm, module)
            norms += getattr(vars(module)["forward"], "__func__", None) in (fused_rms_norm, fused_rms_norm_recompute)
        modeling = sys.modules.get(type(module).__module__)
        if modeling is not None and modeling.__name__ not in seen:
            seen.add(modeling.__name__)
            rope_modules += _patch_rope(modeling)
    logger.debug("fused RMSNorm on %d modules, rotary embedding in %d modeling modules", norms, rope_modules)
    return {"rms_norms": norms, "rope_modules": rope_modules}
