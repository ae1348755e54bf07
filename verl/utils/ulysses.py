"""Ulysses sequence parallelism: one packed row split across the ranks of a sequence-parallel (SP) group.

Each rank of an SP group holds ``T / sp`` consecutive tokens of the packed row (padded to a multiple of sp) and
runs every per-token layer (embeddings, norms, MLPs, rotary with the *global* position ids) on them alone.
Attention needs the whole sequence, so before it an all-to-all trades the sequence shard for a head shard
(every rank then sees all T tokens of ``H / sp`` heads), and after it the reverse all-to-all restores the
sequence shard. Activations per rank shrink by sp; the weights are the same on every rank of the group.

Per-token outputs (log-probs, entropies, values) are all-gathered over the group before the loss, so each rank
computes the same loss. In the backward each rank keeps only its own slice's gradient: every token's gradient is
then produced once in the group, and the sum over the group's ranks is the full gradient. FSDP averages over all
``dp * sp`` ranks while the data differs only across the dp groups, so the gather's backward multiplies by sp to
make the average over dp groups that sp=1 would give.

Names follow upstream verl's ``verl.utils.ulysses``.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

__all__ = [
    "set_ulysses_sequence_parallel_group",
    "get_ulysses_sequence_parallel_group",
    "get_ulysses_sequence_parallel_world_size",
    "get_ulysses_sequence_parallel_rank",
    "ulysses_sequence_parallel",
    "active_ulysses_group",
    "gather_seq_scatter_heads",
    "gather_heads_scatter_seq",
    "gather_outputs_and_unpad",
    "ulysses_pad_and_slice_inputs",
    "create_ulysses_group",
    "resolve_ulysses_group",
]

_DEFAULT_GROUP: ProcessGroup | None = None
# the group of the forward running now (None outside one): attention splits heads only inside such a forward
_ACTIVE: contextvars.ContextVar[ProcessGroup | None] = contextvars.ContextVar("verl_ulysses_group", default=None)


def set_ulysses_sequence_parallel_group(group: ProcessGroup | None) -> None:
    """The worker's SP group (None: no sequence parallelism); actors/critics built after this use it."""
    global _DEFAULT_GROUP
    _DEFAULT_GROUP = group


def get_ulysses_sequence_parallel_group() -> ProcessGroup | None:
    return _DEFAULT_GROUP


def get_ulysses_sequence_parallel_world_size(group: ProcessGroup | None = None) -> int:
    group = group if group is not None else _DEFAULT_GROUP
    return dist.get_world_size(group) if group is not None else 1


def get_ulysses_sequence_parallel_rank(group: ProcessGroup | None = None) -> int:
    group = group if group is not None else _DEFAULT_GROUP
    return dist.get_rank(group) if group is not None else 0


def create_ulysses_group(sp_size: int, role: str) -> ProcessGroup | None:
    """The SP group of this rank: consecutive global ranks [k*sp, (k+1)*sp) form one group (the dp x sp layout,
    sp innermost, as upstream's ``("dp", "sp")`` device mesh). None when sp is 1.

    Every rank must call this (``new_group`` is collective). ``role`` names the config key in errors.
    """
    if sp_size == 1:
        return None
    if not dist.is_initialized():
        raise RuntimeError(f"{role}.ulysses_sequence_parallel_size={sp_size} needs torch.distributed initialised")
    world = dist.get_world_size()
    if world % sp_size:
        raise ValueError(f"{role}.ulysses_sequence_parallel_size={sp_size} must divide the role's world size {world}")
    mine = None
    for start in range(0, world, sp_size):
        group = dist.new_group(list(range(start, start + sp_size)))
        if start <= dist.get_rank() < start + sp_size:
            mine = group
    return mine


@contextlib.contextmanager
def ulysses_sequence_parallel(group: ProcessGroup | None) -> Iterator[None]:
    """Around a packed forward whose tokens are this rank's sequence shard of ``group`` (None: no-op)."""
    token = _ACTIVE.set(group)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_ulysses_group() -> ProcessGroup | None:
    return _ACTIVE.get()


def _all_to_all(x: torch.Tensor, group: ProcessGroup, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    sp = dist.get_world_size(group)
    send = torch.stack(x.chunk(sp, dim=scatter_dim), dim=0).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)  # chunk i of recv came from rank i
    return torch.cat(recv.unbind(0), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, scatter_dim, gather_dim):
        ctx.group, ctx.scatter_dim, ctx.gather_dim = group, scatter_dim, gather_dim
        return _all_to_all(x, group, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx, grad):
        return _all_to_all(grad.contiguous(), ctx.group, ctx.gather_dim, ctx.scatter_dim), None, None, None


def gather_seq_scatter_heads(x: torch.Tensor, seq_dim: int, head_dim: int,
                             group: ProcessGroup | None = None) -> torch.Tensor:
    """(.., T/sp along seq_dim, H along head_dim) -> (.., T, H/sp): before attention. Differentiable."""
    group = group if group is not None else _DEFAULT_GROUP
    if group is None or dist.get_world_size(group) == 1:
        return x
    return _AllToAll.apply(x, group, head_dim, seq_dim)


def gather_heads_scatter_seq(x: torch.Tensor, head_dim: int, seq_dim: int,
                             group: ProcessGroup | None = None) -> torch.Tensor:
    """(.., T, H/sp) -> (.., T/sp, H): after attention. Differentiable."""
    group = group if group is not None else _DEFAULT_GROUP
    if group is None or dist.get_world_size(group) == 1:
        return x
    return _AllToAll.apply(x, group, seq_dim, head_dim)


class _GatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, dim, grad_scale):
        ctx.group, ctx.dim, ctx.grad_scale = group, dim, grad_scale
        parts = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, x.contiguous(), group=group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, grad):
        # every rank of the group computed the same loss from the gathered tensor: keep this rank's slice only
        mine = grad.chunk(dist.get_world_size(ctx.group), dim=ctx.dim)[dist.get_rank(ctx.group)]
        return mine * ctx.grad_scale, None, None, None


def gather_outputs_and_unpad(x: torch.Tensor, gather_dim: int, unpad_dim: int | None = None, padding_size: int = 0,
                             grad_scaler: bool = True, group: ProcessGroup | None = None) -> torch.Tensor:
    """All-gather per-token outputs over the SP group along ``gather_dim`` and drop the ``padding_size`` tail added
    by ``ulysses_pad_and_slice_inputs``. ``grad_scaler``: multiply the backward by sp (see the module docstring)."""
    group = group if group is not None else _DEFAULT_GROUP
    if group is None or dist.get_world_size(group) == 1:
        return x
    scale = float(dist.get_world_size(group)) if grad_scaler else 1.0
    x = _GatherSeq.apply(x, group, gather_dim, scale)
    if padding_size:
        unpad_dim = gather_dim if unpad_dim is None else unpad_dim
        x = x.narrow(unpad_dim, 0, x.size(unpad_dim) - padding_size)
    return x


def ulysses_pad_and_slice_inputs(input_ids: torch.Tensor, position_ids: torch.Tensor, sp_size: int,
                                 sp_rank: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Pad a packed (1, T) row to a multiple of ``sp_size`` and return this rank's (1, T/sp) slices of the ids and
    the (global) position ids, and the pad length. Pad tokens are id 0 at positions 0.. (their own segment)."""
    pad = (-input_ids.size(1)) % sp_size
    if pad:
        input_ids = torch.nn.functional.pad(input_ids, (0, pad), value=0)
        # (1, T), or a VLM's (axes, 1, T): every axis of the pad segment counts 0, 1, ...
        tail = torch.arange(pad, dtype=position_ids.dtype, device=position_ids.device)
        tail = tail.expand(*position_ids.shape[:-1], pad)
        position_ids = torch.cat([position_ids, tail], dim=-1)
    width = input_ids.size(1) // sp_size
    return (input_ids[:, sp_rank * width:(sp_rank + 1) * width],
            position_ids[..., sp_rank * width:(sp_rank + 1) * width], pad)


def resolve_ulysses_group(sp_size: int, key: str, group: ProcessGroup | None = None) -> ProcessGroup | None:
    """The SP group an actor/critic with ``sp_size`` runs in: ``group`` if given, else the worker's
    (``set_ulysses_sequence_parallel_group``); None for sp 1. ``key`` names the config key in errors."""
    if sp_size == 1:
        return None
    group = group if group is not None else _DEFAULT_GROUP
    if group is None or dist.get_world_size(group) != sp_size:
        have = "none" if group is None else f"one of {dist.get_world_size(group)} ranks"
        raise RuntimeError(f"{key}={sp_size} but this rank's sequence-parallel group is {have}; the worker creates "
                           f"it (create_ulysses_group) and sets it (set_ulysses_sequence_parallel_group) first")
    return group
