"""Which activations gradient checkpointing keeps: every layer's input only (full) or its expensive ops' outputs.

Full recompute (HF's ``gradient_checkpointing_enable``, upstream verl's behaviour) keeps each decoder layer's input
and runs the layer's whole forward again in backward: on this model a third more matmul FLOPs. Selective
checkpointing keeps the outputs of the layer's matmuls and attention kernels (the FLOP-heavy ops) and recomputes
only the cheap ops between them (norms, rotary, activation function, casts, residual adds): backward runs no matmul
twice, and the activations of those cheap ops are freed — a smaller saving than full recompute's. Both give the
gradients of no checkpointing (the recomputed ops are deterministic; tests/models/test_checkpoint_policy.py).

Selective checkpointing runs in one of two ways. On Llama-formula layers (Llama, Qwen2, SmolLM, ...) with the fused
norms, autograd functions recompute the SwiGLU product and the normalised input in the backward
(verl.models.selective_recompute): no Python dispatch per op, and about a third of the activations freed. Elsewhere,
torch's ``create_selective_checkpoint_contexts`` with a policy that keeps the matmul and attention outputs.

``auto`` (the default of ``gradient_checkpointing_policy``) picks by device. On a GPU memory is the scarcer resource:
``auto`` is selective when what it keeps for the largest micro-batch fits in a quarter of the card (a 135M-1B model
at a 16k-token budget), else upstream's full recompute (a 7B model at that budget). On a CPU the activations live in host RAM (a 135M model's selective
activations are a few hundred MB) and the matmul FLOPs are what a step waits for, so it is selective.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from verl.models.selective_recompute import (
    disable_selective_recompute,
    enable_selective_recompute,
    selective_recompute_enabled,
)
from verl.utils import device

__all__ = ["resolve_checkpointing_policy", "selective_activation_bytes", "checkpointing_kwargs", "apply_gradient_checkpointing",
           "applied_checkpointing"]

_POLICIES = ("full", "selective")


# On a GPU, selective checkpointing is chosen for ``auto`` when the activations it keeps for one micro-batch need at
# most this share of the card's memory (the rest holds weights, gradients, optimizer state, the rollout's KV cache).
SELECTIVE_GPU_MEMORY_SHARE = 0.25


def selective_activation_bytes(hf_config: Any, tokens: int, bytes_per_element: int = 2) -> int:
    """An upper estimate of what selective checkpointing keeps for backward over ``tokens`` tokens of one
    micro-batch: per decoder layer and token, the layer and norm inputs, q/k/v, the attention and projection
    outputs, the residual sums (about 8 x hidden) and the SwiGLU's gate, up and product (3 x intermediate), in the
    compute dtype. Full recompute keeps one hidden vector per layer and token instead."""
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    hidden = int(text.hidden_size)
    intermediate = int(getattr(text, "intermediate_size", None) or 4 * hidden)
    per_token_layer = 8 * hidden + 3 * intermediate
    return int(tokens) * int(text.num_hidden_layers) * per_token_layer * bytes_per_element


def resolve_checkpointing_policy(policy: str, activation_bytes: int | None = None) -> tuple[str, str]:
    """(``full`` | ``selective``, why) for a configured policy; ``auto`` follows the device this process uses.

    On a GPU ``auto`` is selective when ``activation_bytes`` (``selective_activation_bytes`` of the largest
    micro-batch) fits in SELECTIVE_GPU_MEMORY_SHARE of the card's memory, else upstream's full recompute; without an
    estimate it is full."""
    if policy in _POLICIES:
        return policy, "set"
    if policy != "auto":
        raise ValueError(f"gradient_checkpointing_policy={policy!r}: expected auto, full or selective")
    if device.is_cuda_available():
        return _gpu_policy(activation_bytes)
    return ("selective", "CPU: matmul FLOPs are scarce and host memory is not, so matmul and attention outputs are "
            "kept and only the cheap ops between them are recomputed")


def _gpu_policy(activation_bytes: int | None) -> tuple[str, str]:
    if activation_bytes is None:
        return "full", "GPU, activation size unknown: recompute whole layers as upstream does"
    card = torch.cuda.get_device_properties(device.get_device_id()).total_memory
    needed, share = activation_bytes / 2**30, SELECTIVE_GPU_MEMORY_SHARE * card / 2**30
    if activation_bytes <= SELECTIVE_GPU_MEMORY_SHARE * card:
        return "selective", (f"GPU: the kept activations of the largest micro-batch (~{needed:.1f} GiB) fit in "
                             f"{share:.0f} GiB, a quarter of the card, so no matmul is recomputed")
    return "full", (f"GPU: the kept activations of the largest micro-batch (~{needed:.1f} GiB) exceed {share:.0f} "
                    "GiB, a quarter of the card, so whole layers are recomputed as upstream does")


@functools.cache
def _saved_ops() -> frozenset:
    aten = torch.ops.aten
    names = ("mm", "addmm", "bmm", "_scaled_dot_product_flash_attention_for_cpu",
             "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_flash_attention_forward", "_efficient_attention_forward")
    return frozenset(getattr(aten, name).default for name in names if hasattr(aten, name))


def _keep_expensive(saved: frozenset, ctx, op, *args, **kwargs) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in saved else CheckpointPolicy.PREFER_RECOMPUTE


def _selective_contexts():
    # torch calls this at every checkpointed layer call, so the op set is built once
    return create_selective_checkpoint_contexts(functools.partial(_keep_expensive, _saved_ops()))


def checkpointing_kwargs(policy: str) -> dict:
    """``gradient_checkpointing_kwargs`` for HF's ``gradient_checkpointing_enable`` (torch's non-reentrant
    checkpoint) under ``policy`` (``auto`` resolved here)."""
    resolved, _ = resolve_checkpointing_policy(policy)
    kwargs = {"use_reentrant": False}
    if resolved == "selective":
        kwargs["context_fn"] = _selective_contexts
    return kwargs


def apply_gradient_checkpointing(module: torch.nn.Module, policy: str | None) -> str:
    """Switch a loaded HF model to ``policy`` (None: no checkpointing), undoing any earlier setting first.

    Returns what runs: ``off``, ``full``, ``selective`` (the recompute functions) or ``selective-torch`` (torch's
    selective-checkpointing mode, for layers the functions do not cover).
    """
    disable_selective_recompute(module)
    if getattr(module, "is_gradient_checkpointing", False):
        module.gradient_checkpointing_disable()
    if policy is None:
        return "off"
    resolved, _ = resolve_checkpointing_policy(policy)
    if resolved == "selective" and enable_selective_recompute(module):
        return "selective"
    module.gradient_checkpointing_enable(gradient_checkpointing_kwargs=checkpointing_kwargs(resolved))
    return "full" if resolved == "full" else "selective-torch"


def applied_checkpointing(module: torch.nn.Module) -> str:
    """What apply_gradient_checkpointing left ``module`` running: off, full, selective or selective-torch."""
    if selective_recompute_enabled(module):
        return "selective"
    if not getattr(module, "is_gradient_checkpointing", False):
        return "off"
    layer = next((m for m in module.modules() if hasattr(m, "_gradient_checkpointing_func")), None)
    keywords = getattr(getattr(layer, "_gradient_checkpointing_func", None), "keywords", {})
    return "selective-torch" if "context_fn" in keywords else "full"
