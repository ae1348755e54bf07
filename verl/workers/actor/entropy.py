"""The per-token entropy the actor computes from its logits, as its config section asks (upstream's keys):

- ``entropy_from_logits_with_chunking``: upstream's chunked function (``entropy_from_logits_chunk_size`` rows at a
  time, 2048 by default) instead of the default one, which already works in row chunks of at most 2^24 elements
  here; the numbers are the same.
- ``entropy_checkpointing``: when the entropy is part of the loss (``entropy_coeff`` != 0), its float32 softmax over
  the vocabulary is not kept for backward but recomputed there (``torch.utils.checkpoint``): one (tokens x vocab)
  float32 tensor less per micro-batch, one more softmax pass in backward. Without grad it changes nothing.
- ``sum_pi_squared_checkpointing`` (with ``calculate_sum_pi_squared``): the same trade for sum_v pi_v^2, the optimal
  token baseline's input (verl.algos.otb); it is computed in the no-grad log-prob pass, so like entropy
  checkpointing there it changes nothing but is honoured wherever a gradient flows through it.
- ``use_torch_compile``: the entropy function goes through ``torch.compile(dynamic=True)``, as upstream's actor
  does: one fused kernel instead of a softmax, a logsumexp and a product over the (tokens x vocab) logits. The
  entropies and their gradient are those of the eager function up to float32 rounding (the fused reductions add
  in another order, ~1e-6 here); the first call compiles (seconds; on a CPU inductor needs a C++ compiler). The
  reference section has the key too and compiles the same function, which its log-prob pass never calls.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from verl.utils.torch_functional import entropy_from_logits, entropy_from_logits_with_chunking

__all__ = ["entropy_function", "sum_pi_squared_function"]


def entropy_function(config: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """(…, V) logits -> float32 (…) entropies, for an ActorConfig or RefConfig section."""
    base = entropy_from_logits
    if config.entropy_from_logits_with_chunking:
        base = functools.partial(entropy_from_logits_with_chunking,
                                 chunk_size=getattr(config, "entropy_from_logits_chunk_size", 2048))
    if getattr(config, "use_torch_compile", False):
        base = torch.compile(base, dynamic=True)
    if not config.entropy_checkpointing:
        return base

    def recomputed_in_backward(logits: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and logits.requires_grad:
            return checkpoint(base, logits, use_reentrant=False)
        return base(logits)

    return recomputed_in_backward


def sum_pi_squared_function(config: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """(…, V) logits -> float32 (…) sum_v softmax_v^2, checkpointed under grad with sum_pi_squared_checkpointing."""
    from verl.algos.otb import sum_pi_squared_from_logits

    if not getattr(config, "sum_pi_squared_checkpointing", False):
        return sum_pi_squared_from_logits

    def recomputed_in_backward(logits: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and logits.requires_grad:
            return checkpoint(sum_pi_squared_from_logits, logits, use_reentrant=False)
        return sum_pi_squared_from_logits(logits)

    return recomputed_in_backward
