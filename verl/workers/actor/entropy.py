"""The per-token entropy the actor computes from its logits, as its config section asks (upstream's keys):

- ``entropy_from_logits_with_chunking``: upstream's chunked function (2048 rows at a time) instead of the default
  one, which already works in row chunks of at most 2^24 elements here; the numbers are the same.
- ``entropy_checkpointing``: when the entropy is part of the loss (``entropy_coeff`` != 0), its float32 softmax over
  the vocabulary is not kept for backward but recomputed there (``torch.utils.checkpoint``): one (tokens x vocab)
  float32 tensor less per micro-batch, one more softmax pass in backward. Without grad it changes nothing.
- ``use_torch_compile``: the entropy function goes through ``torch.compile(dynamic=True)``, as upstream's actor
  does: one fused kernel instead of a softmax, a logsumexp and a product over the (tokens x vocab) logits. The
  entropies and their gradient are those of the eager function up to float32 rounding (the fused reductions add
  in another order, ~1e-6 here); the first call compiles (seconds; on a CPU inductor needs a C++ compiler). The
  reference section has the key too and compiles the same function, which its log-prob pass never calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from verl.utils.torch_functional import entropy_from_logits, entropy_from_logits_with_chunking

__all__ = ["entropy_function"]


def entropy_function(config: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """(…, V) logits -> float32 (…) entropies, for an ActorConfig or RefConfig section."""
    base = entropy_from_logits_with_chunking if config.entropy_from_logits_with_chunking else entropy_from_logits
    if getattr(config, "use_torch_compile", False):
        base = torch.compile(base, dynamic=True)
    if not config.entropy_checkpointing:
        return base

    def recomputed_in_backward(logits: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled() and logits.requires_grad:
            return checkpoint(base, logits, use_reentrant=False)
        return base(logits)

    return recomputed_in_backward
