"""Tensor helpers shared by the actor, critic, rollout and trainers.

Log-prob and entropy helpers work in float32 over row chunks: the vocabulary dimension makes the logits the largest
tensor of a step, and a full float32 copy of bf16 logits (or the exp temporary of logsumexp) would double the peak.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

# Upstream keeps the masked reductions in this module; re-exported so `torch_functional.masked_mean` ports.
from verl.utils.torch_masked import masked_mean, masked_sum, masked_var, masked_whiten

__all__ = [
    "logprobs_from_logits",
    "entropy_from_logits",
    "entropy_from_logits_with_chunking",
    "get_response_mask",
    "pad_2d_list_to_length",
    "compute_position_id_with_mask",
    "get_cosine_schedule_with_warmup",
    "get_constant_schedule_with_warmup",
    "clip_grad_norm_",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "distributed_masked_mean",
    "distributed_mean_max_min_std",
    "expand_as_nested",
]

# Elements (rows x vocab) handled at once; 2**24 float32 values = 64 MiB of temporaries per chunk.
_CHUNK_ELEMENTS = 1 << 24


def _at_least_float32(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _row_splits(flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Row chunks of a (rows, V) tensor as views. ``split``, not slicing: a slice's backward allocates and
    zero-fills a gradient of the whole tensor per chunk, while the chunks of one split share one concatenation."""
    return flat.split(max(1, _CHUNK_ELEMENTS // max(1, flat.shape[-1])))


class _LogProbOfLabel(torch.autograd.Function):
    """log softmax(z)[label] per row, with a hand-written backward.

    d/dz = g * (onehot(label) - softmax(z)), with the forward's logsumexp kept (one float per row), is written
    chunk by chunk into one uninitialised buffer shaped like the logits. Autograd's own graph for
    ``gather - logsumexp`` would zero-fill a (rows, V) gradient for the gather, build another for the logsumexp and
    add them: three passes over the largest tensor of the step instead of one.
    """

    @staticmethod
    def forward(ctx, flat_logits: torch.Tensor, flat_labels: torch.Tensor) -> torch.Tensor:
        wide = _at_least_float32(flat_logits.dtype)
        lse = torch.cat([torch.logsumexp(chunk.to(wide), dim=-1) for chunk in _row_splits(flat_logits)])
        picked = flat_logits.gather(-1, flat_labels[:, None]).squeeze(-1).to(wide)
        ctx.save_for_backward(flat_logits, flat_labels, lse)
        return (picked - lse).float()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        flat_logits, flat_labels, lse = ctx.saved_tensors
        grad = torch.empty_like(flat_logits, memory_format=torch.contiguous_format)
        start = 0
        for chunk, out in zip(_row_splits(flat_logits), _row_splits(grad)):
            rows = slice(start, start + chunk.shape[0])
            start = rows.stop
            # softmax - onehot in float32 (or wider), then times -g: one write into the (possibly bf16) gradient
            delta = chunk.to(lse.dtype).sub(lse[rows, None]).exp_()
            delta.scatter_add_(-1, flat_labels[rows, None], delta.new_full((chunk.shape[0], 1), -1.0))
            out.copy_(delta.mul_(grad_out[rows, None].to(lse.dtype).neg()))
        return grad, None


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor, inplace_backward: bool = True) -> torch.Tensor:
    """log softmax(logits)[label] for every position: logits (..., V), labels (...) -> float32 (...).

    Computed as ``logit[label] - logsumexp(logits)`` per row chunk, so no full (..., V) log-softmax is stored;
    the backward writes the logits' gradient in place, once (``_LogProbOfLabel``).
    ``inplace_backward`` exists for signature compatibility with upstream (a flash-attn kernel option); unused.
    """
    del inplace_backward
    if logits.shape[:-1] != labels.shape:
        raise ValueError(f"logprobs_from_logits: logits {tuple(logits.shape)} need labels of shape "
                         f"{tuple(logits.shape[:-1])}, got {tuple(labels.shape)}")
    vocab = logits.shape[-1]
    flat_logits = logits.reshape(-1, vocab)
    if flat_logits.shape[0] == 0:
        return flat_logits.new_zeros(labels.shape, dtype=torch.float32)
    return _LogProbOfLabel.apply(flat_logits, labels.reshape(-1).long()).reshape(labels.shape)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dim: (..., V) -> float32 (...).

    H = logsumexp(z) - sum(softmax(z) * z), which avoids log(0) on tokens with vanishing probability. Computed in
    row chunks of at most 2^24 elements, so the float32 temporaries stay bounded whatever the vocabulary.
    """
    return _entropy_in_chunks(logits, None)


def entropy_from_logits_with_chunking(logits: torch.Tensor, chunk_size: int = 2048) -> torch.Tensor:
    """Upstream's chunked entropy: the same numbers as ``entropy_from_logits``, ``chunk_size`` rows at a time."""
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    return _entropy_in_chunks(logits, chunk_size)


def _entropy_in_chunks(logits: torch.Tensor, rows: int | None) -> torch.Tensor:
    vocab = logits.shape[-1]
    flat = logits.reshape(-1, vocab)
    if flat.shape[0] == 0:
        return flat.new_zeros(logits.shape[:-1], dtype=torch.float32)
    parts = []
    for chunk in (flat.split(rows) if rows else _row_splits(flat)):
        chunk = chunk.float()
        probs = torch.softmax(chunk, dim=-1)
        parts.append(torch.logsumexp(chunk, dim=-1) - (probs * chunk).sum(dim=-1))
    return torch.cat(parts).reshape(logits.shape[:-1])


def get_response_mask(response_id: torch.Tensor, eos_token: int | Sequence[int] = 2,
                      dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """1 on every response token up to and including the first EOS, 0 after it.

    response_id: (bs, R). ``eos_token`` may be one id or a list of ids (any of them ends the response).
    A row without EOS is all ones (truncated at the response length).
    """
    eos_ids = [eos_token] if isinstance(eos_token, int) else list(eos_token)
    if not eos_ids:
        raise ValueError("get_response_mask: eos_token is an empty list; pass the tokenizer's eos_token_id")
    is_eos = torch.isin(response_id, torch.tensor(eos_ids, device=response_id.device, dtype=response_id.dtype))
    is_eos = is_eos.long()
    # EOS tokens strictly before each position; the first EOS itself still counts as response.
    eos_before = is_eos.cumsum(dim=-1) - is_eos
    return (eos_before == 0).to(dtype)


def pad_2d_list_to_length(response: Sequence[Sequence[int]], pad_token_id: int,
                          max_length: int | None = None) -> torch.Tensor:
    """Right-pad a list of id lists to max(longest row, max_length) and stack: -> LongTensor (bs, L)."""
    longest = max((len(row) for row in response), default=0)
    target = max(longest, max_length) if max_length is not None else longest
    padded = [list(row) + [pad_token_id] * (target - len(row)) for row in response]
    return torch.tensor(padded, dtype=torch.long).reshape(len(padded), target)


def compute_position_id_with_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position of each token among the real tokens of its row: clip(cumsum(mask) - 1, 0).

    Left padding gets position 0, the first real token 0, and tokens after a masked tail repeat the last position.
    """
    return torch.clamp(torch.cumsum(mask, dim=-1) - 1, min=0)


def get_cosine_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int, num_training_steps: int,
                                    min_lr_ratio: float = 0.0, num_cycles: float = 0.5,
                                    last_epoch: int = -1, zero_indexed_step: bool = True) -> LambdaLR:
    """Linear warmup from ``min_lr_ratio``·lr to lr, then cosine decay to ``min_lr_ratio``·lr.

    ``num_cycles=0.5`` is half a cosine wave (lr -> min once over the training steps); after
    ``num_training_steps`` the lr stays where the wave ends. ``zero_indexed_step=False`` counts the scheduler's
    steps from 1 instead of 0 (the first optimizer step gets the schedule's value at step 1).
    """
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")
    half_span = 0.5 * (1.0 - min_lr_ratio)
    middle = 0.5 * (1.0 + min_lr_ratio)

    def lr_lambda(step: int) -> float:
        step += 0 if zero_indexed_step else 1
        if step < num_warmup_steps:
            return min_lr_ratio + (1.0 - min_lr_ratio) * step / max(1, num_warmup_steps)
        # Clamped so steps past num_training_steps stay at the floor instead of climbing the next wave.
        progress = min(1.0, (step - num_warmup_steps) / max(1, num_training_steps - num_warmup_steps))
        wave = math.cos(math.pi * num_cycles * 2.0 * progress)
        return max(min_lr_ratio, middle + half_span * wave)

    return LambdaLR(optimizer, lr_lambda, last_epoch)


def get_constant_schedule_with_warmup(optimizer: Optimizer, num_warmup_steps: int, last_epoch: int = -1,
                                      zero_indexed_step: bool = True) -> LambdaLR:
    """Linear warmup from 0 to lr over ``num_warmup_steps``, then constant; ``zero_indexed_step=False`` counts
    steps from 1 (the first step's lr is lr / num_warmup_steps instead of 0)."""

    def lr_lambda(step: int) -> float:
        step += 0 if zero_indexed_step else 1
        if step < num_warmup_steps:
            return step / max(1, num_warmup_steps)
        return 1.0

    return LambdaLR(optimizer, lr_lambda, last_epoch)


def clip_grad_norm_(parameters: Iterable[torch.nn.Parameter] | torch.Tensor, max_norm: float | None,
                    norm_type: float = 2.0) -> float:
    """Total gradient norm as a float; grads are clipped to ``max_norm`` only when that norm is finite.

    A non-finite norm is returned as is (inf / nan) with the grads left untouched, so the caller can skip the
    optimizer step. ``max_norm`` None or <= 0 measures without clipping. Works with FSDP2 (DTensor) grads: the
    per-shard norm is reduced across ranks before clipping, so every rank sees the same number.
    """
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return 0.0
    total = torch.nn.utils.get_total_norm(grads, norm_type=norm_type, error_if_nonfinite=False)
    full_tensor = getattr(total, "full_tensor", None)
    if full_tensor is not None:  # DTensor: sharded grads give a partial norm; reduce it over the mesh
        total = full_tensor()
    norm = float(total.item())
    if math.isfinite(norm) and max_norm is not None and max_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return norm


def distributed_masked_mean(local_tensor: torch.Tensor, local_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the elements where ``local_mask`` is 1, over every rank of the default process group.

    Each rank contributes its masked sum and its mask count; the global mean is sum / (count + 1e-8), so a
    batch with nothing selected anywhere gives 0 instead of NaN (upstream's guard). Collective: every rank calls it.
    """
    mask = local_mask.to(local_tensor.dtype)
    stats = torch.stack([(local_tensor * mask).sum(), mask.sum()])
    torch.distributed.all_reduce(stats, op=torch.distributed.ReduceOp.SUM)
    return stats[0] / (stats[1] + 1e-8)


def distributed_mean_max_min_std(local_tensor: torch.Tensor, compute_max: bool = True, compute_min: bool = True,
                                 compute_std: bool = True):
    """(mean, max, min, std) of all elements on all ranks; a statistic not asked for is None.

    std is the sample standard deviation (Bessel's n - 1). Sum, count and sum of squares travel in one
    all-reduce; max and min take one each. Collective: every rank calls it with the same flags.
    """
    values = local_tensor.to(_at_least_float32(local_tensor.dtype))
    stats = torch.stack([values.sum(), torch.tensor(float(values.numel()), device=values.device, dtype=values.dtype),
                         values.square().sum()])
    torch.distributed.all_reduce(stats, op=torch.distributed.ReduceOp.SUM)
    total, count, total_sq = stats
    mean = total / count
    global_max = global_min = global_std = None
    if compute_max:
        global_max = values.max().clone()
        torch.distributed.all_reduce(global_max, op=torch.distributed.ReduceOp.MAX)
    if compute_min:
        global_min = values.min().clone()
        torch.distributed.all_reduce(global_min, op=torch.distributed.ReduceOp.MIN)
    if compute_std:
        # sum((x - mean)^2) = sum(x^2) - count * mean^2, clamped at 0 against rounding.
        global_std = torch.sqrt(torch.clamp(total_sq - count * mean * mean, min=0.0) / (count - 1))
    return mean, global_max, global_min, global_std


def expand_as_nested(tensor: torch.Tensor, nested_tensor: torch.Tensor) -> torch.Tensor:
    """A jagged nested tensor shaped like ``nested_tensor`` (batch, j1) whose row i repeats ``tensor[i]``.

    Used for per-sample values (a temperature per row) next to packed sequences. ``tensor`` must be 1-D with one
    value per row, ``nested_tensor`` a 2-D jagged nested tensor; anything else fails an assertion, as upstream.
    """
    assert getattr(nested_tensor, "is_nested", False), "expand_as_nested: the second argument must be a nested tensor"
    assert nested_tensor.layout == torch.jagged and nested_tensor.dim() == 2, (
        f"expand_as_nested: nested_tensor must be a 2-D jagged tensor (batch, j1), got {nested_tensor.dim()}-D"
    )
    assert tensor.dim() == 1, f"expand_as_nested: tensor must be 1-D (one value per row), got shape {tuple(tensor.shape)}"
    offsets = nested_tensor.offsets()
    assert tensor.shape[0] == offsets.numel() - 1, (
        f"expand_as_nested: tensor has {tensor.shape[0]} values but nested_tensor has {offsets.numel() - 1} rows"
    )
    lengths = offsets.diff().to(tensor.device)
    values = tensor.repeat_interleave(lengths)
    return torch.nested.nested_tensor_from_jagged(values, offsets=offsets.to(values.device))
