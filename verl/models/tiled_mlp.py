"""``model.tiled_mlp`` (upstream v0.7): each decoder layer's MLP computed over ``num_shards`` slices of the sequence.

The MLP's intermediate activations (gate, up, their product: three times the hidden size of ``intermediate_size``
per token) are the largest a dense decoder layer makes. Tiled, the forward runs the MLP on one slice of the tokens
at a time without keeping anything for backward but its input; the backward recomputes each slice with gradients and
back-propagates it, so only one slice's activations exist at any time. The outputs and gradients are the same as
the untiled MLP's (up to the order of the weight-gradient sums); the price is a second MLP forward per backward.

The slices are along the token dimension (dim -2: the sequence of a padded batch, the packed tokens of a
remove-padding batch). Patched are the dense MLP modules of the HF decoder (``gate_proj`` / ``up_proj`` /
``down_proj``: Llama, Qwen2, Qwen3, Mistral, Gemma ...); a model without one is refused.
"""

from __future__ import annotations

import types
from typing import Any

import torch

__all__ = ["apply_tiled_mlp", "TiledMLPFunction", "tiled_mlp_modules"]

_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


class TiledMLPFunction(torch.autograd.Function):
    """``forward(fn, module, x, shards, *params)``: fn(module, slice) over ``shards`` slices of x's dim -2; only x is
    kept, and backward recomputes slice by slice. ``params`` are the module's trainable parameters: their gradients
    are summed over the slices and handed back through autograd."""

    @staticmethod
    def forward(ctx: Any, fn: Any, module: torch.nn.Module, x: torch.Tensor, shards: int,
                *params: torch.Tensor) -> torch.Tensor:
        ctx.fn, ctx.module, ctx.shards = fn, module, shards
        ctx.save_for_backward(x, *params)
        with torch.no_grad():
            return torch.cat([fn(module, part) for part in torch.chunk(x, shards, dim=-2)], dim=-2)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:
        x, *params = ctx.saved_tensors
        wanted = [p for p in params if p.requires_grad]
        param_grads: list[torch.Tensor | None] = [None] * len(wanted)
        x_grads = []
        for part, grad_part in zip(torch.chunk(x, ctx.shards, dim=-2), torch.chunk(grad_out, ctx.shards, dim=-2),
                                   strict=True):
            part = part.detach().requires_grad_(x.requires_grad)
            with torch.enable_grad():
                out = ctx.fn(ctx.module, part)
            inputs = ([part] if x.requires_grad else []) + wanted
            grads = torch.autograd.grad(out, inputs, grad_part, allow_unused=True) if inputs else ()
            if x.requires_grad:
                x_grads.append(grads[0])
                grads = grads[1:]
            for i, g in enumerate(grads):
                if g is not None:
                    param_grads[i] = g if param_grads[i] is None else param_grads[i] + g
        x_grad = torch.cat(x_grads, dim=-2) if x.requires_grad else None
        it = iter(param_grads)
        out_params = tuple(next(it) if p.requires_grad else None for p in params)
        return (None, None, x_grad, None, *out_params)


def _is_dense_mlp(module: torch.nn.Module) -> bool:
    return all(isinstance(getattr(module, name, None), torch.nn.Module) for name in _PROJECTIONS)


def tiled_mlp_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The dense MLP modules of ``model`` that tiling applies to."""
    return [m for m in model.modules() if _is_dense_mlp(m)]


def _tiled_forward(self: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    fn = type(self).forward  # the class's own (untiled) forward
    shards = min(self._verl_tiled_mlp_shards, max(1, x.shape[-2]))
    if shards <= 1:
        return fn(self, x)
    params = [p for p in self.parameters() if p.requires_grad]
    if not torch.is_grad_enabled() or not (x.requires_grad or params):
        # no backward will follow (the log-prob and reference passes): slice by slice, nothing kept
        return torch.cat([fn(self, part) for part in torch.chunk(x, shards, dim=-2)], dim=-2)
    return TiledMLPFunction.apply(fn, self, x, shards, *params)


def apply_tiled_mlp(model: torch.nn.Module, num_shards: int, key: str = "model.tiled_mlp") -> int:
    """Tile every dense MLP of ``model`` over ``num_shards`` token slices; returns how many were patched. ``key``
    names the config section in errors."""
    if num_shards < 1:
        raise ValueError(f"{key}.num_shards must be >= 1, got {num_shards}")
    mlps = tiled_mlp_modules(model)
    if not mlps:
        raise ValueError(f"{key}.enabled=true, but {type(model).__name__} has no dense MLP (gate_proj / up_proj / "
                         f"down_proj) to tile; set {key}.enabled=false")
    for mlp in mlps:
        mlp._verl_tiled_mlp_shards = int(num_shards)
        mlp.forward = types.MethodType(_tiled_forward, mlp)
    return len(mlps)
