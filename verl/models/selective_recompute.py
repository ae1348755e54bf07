"""Selective checkpointing for Llama-formula decoder layers, written as autograd functions instead of torch's mode.

Torch's selective checkpointing (``create_selective_checkpoint_contexts``) runs every op of every checkpointed layer
through a Python dispatch mode, in the forward and again in the recompute: on the demo's update ~31k calls and ~0.6 s
of Python, plus the recomputed norms, rotary embeddings and casts, ~12% over no checkpointing on a CPU. For the two
places where a Llama layer keeps the most bytes of cheap ops, this module recomputes in the backward by hand instead:

- the MLP ``down_proj(silu(gate_proj(x)) * up_proj(x))``: autograd keeps gate, silu(gate), up and the product
  (four intermediate-size tensors per token); ``_SwiGLUDown`` keeps gate and up, the matmul outputs, and recomputes
  silu(gate) * up in the backward (two elementwise passes; no matmul runs twice);
- RMSNorm: the fused norm keeps the float32 normalised input; its recompute variant keeps the bf16 input and 1/rms
  and recomputes x̂ in one pass.

The forward and every gradient are bitwise those of the layers without it (the same ops on the same values;
tests/models/test_selective_recompute.py). What it does not free, unlike torch's mode: the norm outputs the
projections keep and the attention's float32 q/k/v copies. On SmolLM2-135M the activations kept per token
and layer fall by about a third against no checkpointing (torch's mode: about half; full recompute: all but the
layer input). docs/performance.md has the measured time and memory.

``enable_selective_recompute(model)`` switches a loaded model over where its MLPs are Llama's formula (bytecode
compared with transformers' ``LlamaMLP.forward``, SiLU activation), its ``down_proj`` is a plain ``nn.Linear`` and
its norms are the fused ones; it returns False and changes nothing otherwise, and the caller falls back to torch's
mode. LoRA adapters are added after loading: verl.models.lora applies the policy again then, so an adapter on
``down_proj`` moves the model to torch's mode. One added by other code later makes the MLP run its own forward (no
recompute there).
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F

from verl.models.fused_norm_rope import _same_code, fused_rms_norm, fused_rms_norm_recompute

__all__ = ["enable_selective_recompute", "disable_selective_recompute", "selective_recompute_enabled", "swiglu_down"]


class _SwiGLUDown(torch.autograd.Function):
    """down(silu(gate) * up) keeping gate and up; the product is recomputed in the backward."""

    @staticmethod
    def forward(ctx, gate: torch.Tensor, up: torch.Tensor, weight: torch.Tensor,
                bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(gate, up, weight)
        ctx.has_bias = bias is not None
        return F.linear(F.silu(gate) * up, weight, bias)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        gate, up, weight = ctx.saved_tensors
        need_gate, need_up, need_weight, need_bias = ctx.needs_input_grad
        silu = F.silu(gate)
        rows = grad.reshape(-1, grad.shape[-1])
        grad_weight = grad_bias = grad_gate = grad_up = None
        if need_weight:
            grad_weight = rows.t().mm((silu * up).reshape(-1, up.shape[-1]))
        if need_bias and ctx.has_bias:
            grad_bias = rows.sum(0)
        if need_gate or need_up:
            grad_product = grad.matmul(weight)
            if need_up:
                grad_up = grad_product * silu
            if need_gate:
                grad_gate = torch.ops.aten.silu_backward(grad_product * up, gate)
        return grad_gate, grad_up, grad_weight, grad_bias


def swiglu_down(gate: torch.Tensor, up: torch.Tensor, down: torch.nn.Linear) -> torch.Tensor:
    """``down(silu(gate) * up)``, keeping only gate and up for the backward."""
    return _SwiGLUDown.apply(gate, up, down.weight, down.bias)


def _recompute_mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    if type(self.down_proj) is not torch.nn.Linear or not torch.is_grad_enabled():
        return type(self).forward(self, x)  # an adapter on down_proj, or nothing to keep for a backward
    return swiglu_down(self.gate_proj(x), self.up_proj(x), self.down_proj)


def _llama_mlp_forward():
    from transformers.models.llama.modeling_llama import LlamaMLP

    return LlamaMLP.forward


def _is_llama_mlp(module: torch.nn.Module) -> bool:
    from transformers.activations import SiLUActivation

    return (_same_code(type(module).forward, _llama_mlp_forward())
            and type(getattr(module, "act_fn", None)) in (SiLUActivation, torch.nn.SiLU)
            and all(isinstance(getattr(module, name, None), torch.nn.Module)
                    for name in ("gate_proj", "up_proj", "down_proj")))


def _instance_forward(module: torch.nn.Module):
    return getattr(vars(module).get("forward"), "__func__", None)


def enable_selective_recompute(model: torch.nn.Module) -> bool:
    """Switch every Llama-formula MLP and fused RMSNorm of ``model`` to recompute in the backward (idempotent).

    True when the model has such MLPs, each with a plain ``nn.Linear`` down_proj, and every RMSNorm is a fused one;
    otherwise nothing is changed and False is returned.
    """
    mlps = [m for m in model.modules() if _is_llama_mlp(m)]
    norms = [m for m in model.modules() if _instance_forward(m) in (fused_rms_norm, fused_rms_norm_recompute)]
    fused = {id(m) for m in norms}
    if not mlps or not norms or any("forward" in vars(m) and _instance_forward(m) is not _recompute_mlp_forward
                                    for m in mlps):
        return False  # no Llama MLP, or someone else's instance forward, which stays
    if any(type(m.down_proj) is not torch.nn.Linear for m in mlps):
        return False  # an adapter on down_proj: the function would run its own forward and keep the whole MLP
    if any(type(m).__name__.endswith("RMSNorm") and id(m) not in fused for m in model.modules()):
        return False  # an unfused norm (VERL_FUSED_NORM_ROPE=0, another formula) keeps its float32 intermediates
    for mlp in mlps:
        mlp.forward = types.MethodType(_recompute_mlp_forward, mlp)
    for norm in norms:
        norm.forward = types.MethodType(fused_rms_norm_recompute, norm)
    return True


def disable_selective_recompute(model: torch.nn.Module) -> None:
    """Back to the modules' own MLP forward and the fused norm that keeps its normalised input."""
    for module in model.modules():
        if _instance_forward(module) is _recompute_mlp_forward:
            del module.forward
        elif _instance_forward(module) is fused_rms_norm_recompute:
            module.forward = types.MethodType(fused_rms_norm, module)


def selective_recompute_enabled(model: torch.nn.Module) -> bool:
    """Whether enable_selective_recompute switched ``model`` over."""
    return any(_instance_forward(m) is _recompute_mlp_forward for m in model.modules())
