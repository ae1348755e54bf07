"""Top-k log-probabilities for on-policy distillation, as upstream's `verl.trainer.distillation.fsdp.utils`.

A student and a teacher compare their distributions only on a few tokens per position: each model's own top k, the
other model's top k, or both. This module computes those columns from one model's logits.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["topk_logprobs_from_logits"]


def topk_logprobs_from_logits(
    logits: torch.Tensor, k: int, compute_topk: bool, topk_indices: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of `logits` (total_tokens, vocab) at chosen vocabulary columns.

    - `topk_indices` given: gather at those columns (k or 2k per row, e.g. the other model's top k).
    - `compute_topk`: add this model's own top k.
    - both: the gathered columns come first, then the computed ones (2k in all). The result is then sorted by
      vocabulary index, and every repeat of an index but the last gets -inf, so a token in both sets counts once
      in a loss that sums probabilities over the columns.

    Returns (log-probabilities, indices), both (total_tokens, k) or (total_tokens, 2k).
    """
    if topk_indices is None and not compute_topk:
        raise ValueError("topk_logprobs_from_logits needs topk_indices to gather at, compute_topk=True, or both.")
    logprobs = F.log_softmax(logits, dim=-1)
    values: list[torch.Tensor] = []
    columns: list[torch.Tensor] = []
    if topk_indices is not None:
        if topk_indices.is_nested:
            topk_indices = topk_indices.values()  # jagged per-sequence rows, flattened to (total_tokens, width)
        if topk_indices.shape[-1] not in (k, 2 * k):
            raise ValueError(f"Expected topk_indices to have shape [-1, {k}] or [-1, {2 * k}], "
                             f"but got {tuple(topk_indices.shape)}.")
        values.append(logprobs.gather(-1, topk_indices))
        columns.append(topk_indices)
    if compute_topk:
        own_values, own_columns = logprobs.topk(k, dim=-1)
        values.append(own_values)
        columns.append(own_columns)

    out_values = torch.cat(values, dim=-1)
    out_columns = torch.cat(columns, dim=-1)
    if out_values.shape[-1] not in (k, 2 * k):
        raise ValueError(f"Expected the top-k log-probs to have shape [-1, {k}] or [-1, {2 * k}], "
                         f"but got {tuple(out_values.shape)}.")
    if out_values.shape[-1] == 2 * k:
        out_columns, order = out_columns.sort(dim=-1, stable=True)
        out_values = out_values.gather(-1, order)
        # after sorting, a repeat sits right before its twin; the last copy of each index keeps its value
        repeat = torch.zeros_like(out_columns, dtype=torch.bool)
        repeat[..., :-1] = out_columns[..., 1:] == out_columns[..., :-1]
        out_values = out_values.masked_fill(repeat, float("-inf"))
    return out_values, out_columns
