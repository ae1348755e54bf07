"""Micro-batch plumbing shared by the actor and the critic (their update loop is verl.workers.update_loop;
mini-batches come from DataProto's own iterator, verl.protocol.helpers.iterate_mini_batches).

Rules that keep FSDP ranks in lockstep live here: every rank runs the same number of micro-batch forwards and
backwards (a rank that skips one would leave the others waiting in an all-gather / reduce-scatter), and a
decision that must be unanimous (abort on a NaN loss) is reduced over the world first.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable

import torch
import torch.distributed as dist
from tensordict import TensorDict
from torch.distributed.fsdp import FSDPModule

from verl.protocol import DataProto
from verl.utils.device import get_default_device, get_device_name
from verl.utils.seqlen_balancing import get_reverse_idx, rearrange_micro_batches
from verl.utils.torch_functional import clip_grad_norm_
from verl.workers.fsdp_utils import drop_unreduced_gradients, fsdp_modules, restore_reshard_settings, unsharded

__all__ = [
    "GradientAccumulation",
    "forwards_context",
    "resharded_after",
    "NonFiniteLossError",
    "stop_on_nonfinite_losses",
    "metric_floats",
    "metric_value",
    "clipped_optimizer_step",
    "make_micro_batches",
    "restore_order",
    "loss_share",
    "module_device",
    "any_rank",
    "require_meta",
]

logger = logging.getLogger(__name__)


class NonFiniteLossError(RuntimeError):
    """A loss was NaN/inf: the update stops with the step (epoch, mini-batch, micro-batch) that produced it."""


# Aggregation modes whose mini-batch loss is a mean over sequences that have at least one valid token.
_SEQUENCE_MODES = ("seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def require_meta(data: DataProto, key: str, caller: str):
    if key not in data.meta_info:
        raise KeyError(f"{caller}: data.meta_info[{key!r}] is missing; the trainer/worker sets it before this call "
                       f"(present: {sorted(data.meta_info)})")
    return data.meta_info[key]


def make_micro_batches(batch: TensorDict, micro_batch_size: int | None, use_dynamic_bsz: bool,
                       max_token_len: int | None, what: str) -> tuple[list[TensorDict], list[list[int]] | None]:
    """Fixed-size micro-batches, or token-budget ones (with the row indices each took) when dynamic.

    ``what`` names the config keys in error messages, e.g. "actor.ppo_micro_batch_size_per_gpu".
    """
    if use_dynamic_bsz:
        if not max_token_len or max_token_len < 1:
            raise ValueError(f"use_dynamic_bsz needs a positive max token length ({what}), got {max_token_len!r}")
        micro_batches, indices = rearrange_micro_batches(batch, max_token_len=int(max_token_len))
        return micro_batches, indices
    if not micro_batch_size or micro_batch_size < 1:
        raise ValueError(f"a positive micro-batch size is needed ({what}) when use_dynamic_bsz is off, "
                         f"got {micro_batch_size!r}")
    return list(batch.split(int(micro_batch_size))), None


def restore_order(parts: list[torch.Tensor], indices: list[list[int]] | None) -> torch.Tensor:
    """Concatenate per-micro-batch outputs and undo the dynamic-batch permutation."""
    out = torch.cat(parts, dim=0)
    if indices is None:
        return out
    flat = [i for group in indices for i in group]
    reverse = torch.tensor(get_reverse_idx(flat), dtype=torch.long, device=out.device)
    return out[reverse]


def loss_share(micro_mask: torch.Tensor, mini_mask: torch.Tensor, loss_agg_mode: str) -> float:
    """The weight of one micro-batch's loss in its mini-batch, so accumulated grads equal the mini-batch loss's.

    token-mean: the micro-batch's share of the mini-batch's response tokens (its loss is a mean over its own
    tokens, so weighting by rows would over-count short responses); seq-mean-*: its share of the sequences
    with at least one valid token (agg_loss ignores empty rows); token-sum: 1 (sums add up). The result does
    not depend on how the mini-batch was cut into micro-batches (fixed or dynamic). An empty share is 0.
    """
    if loss_agg_mode == "token-mean":
        mini_tokens = float(mini_mask.sum().item())
        return float(micro_mask.sum().item()) / mini_tokens if mini_tokens > 0 else 0.0
    if loss_agg_mode in _SEQUENCE_MODES:
        mini_rows = float((mini_mask.sum(dim=-1) > 0).sum().item())
        micro_rows = float((micro_mask.sum(dim=-1) > 0).sum().item())
        return micro_rows / mini_rows if mini_rows > 0 else 0.0
    if loss_agg_mode == "token-sum":
        return 1.0
    raise ValueError(f"loss_agg_mode {loss_agg_mode!r} is not supported; use one of "
                     f"{('token-mean', 'token-sum') + _SEQUENCE_MODES}")


def module_device(module: torch.nn.Module) -> torch.device:
    """Where the module computes: the accelerator for an FSDP2 module (its shards may be offloaded to CPU),
    else the device of its first parameter."""
    if isinstance(module, FSDPModule):
        return get_default_device()
    for param in module.parameters():
        return param.device
    return torch.device("cpu")


def any_rank(flag: bool) -> bool:
    """True when ``flag`` is True on any rank (just ``flag`` outside torch.distributed)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    device = "cpu" if dist.get_backend() == "gloo" else get_device_name()
    t = torch.tensor([1 if flag else 0], dtype=torch.long, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


def stop_on_nonfinite_losses(losses: list[torch.Tensor], optimizer: torch.optim.Optimizer, role: str,
                             where: Callable[[int], str], details: list[dict]) -> None:
    """Raise NonFiniteLossError (grads zeroed, no step) when any of one optimizer step's micro-batch ``losses`` is
    NaN/inf on this or any other rank; the message names the first such micro-batch (``where(i)``, ``details[i]``).

    Checked once per optimizer step rather than before each backward: one host sync per step instead of one per
    micro-batch (on a GPU each sync stalls the queue of kernels). A NaN loss's backward only fills gradients that
    are then dropped here (and GradientAccumulation drops unreduced ones), so no step ever sees them."""
    if not losses:
        return
    finite = torch.isfinite(torch.stack([loss.detach().float().reshape(()) for loss in losses])).tolist()
    first_bad = next((i for i, ok in enumerate(finite) if not ok), None)
    if any_rank(first_bad is not None):  # unanimous, or the healthy ranks would step alone
        optimizer.zero_grad()
        if first_bad is None:
            what = "on another rank"
        else:
            detail = metric_floats([details[first_bad]])[0]
            what = f"at {where(first_bad)}: loss={losses[first_bad].item()} ({detail})"
        raise NonFiniteLossError(f"{role} loss is not finite {what}; no optimizer step was taken. "
                                 f"Check the batch (advantages/returns/log-probs) for NaN or lower the learning rate")


def metric_value(value):
    """A metric as the update loop collects it: a tensor stays on its device, detached (read back once per step
    by ``metric_floats``)."""
    return value.detach() if isinstance(value, torch.Tensor) else float(value)


def metric_floats(records: list[dict]) -> list[dict[str, float]]:
    """Per-micro-batch metric dicts whose values may be 0-d tensors on the device, as floats, with one host copy
    for all of them (instead of an ``.item()`` sync per value per micro-batch)."""
    places = [(i, k) for i, record in enumerate(records) for k, v in record.items() if isinstance(v, torch.Tensor)]
    out = [{k: float(v) for k, v in record.items() if not isinstance(v, torch.Tensor)} for record in records]
    if places:
        values = torch.stack([records[i][k].detach().float().reshape(()) for i, k in places]).tolist()
        for (i, k), value in zip(places, values):
            out[i][k] = value
    return [{k: out[i][k] for k in record} for i, record in enumerate(records)]  # each record's own key order


class GradientAccumulation(contextlib.AbstractContextManager):
    """One optimizer step's micro-batch backwards on a module; call ``before_backward(i)`` before each.

    On CPU an FSDP2 module is gathered once per optimizer step and reduce-scattered once, after the last
    micro-batch: in between, every unit stays unsharded (FSDP2's ``set_reshard_after_forward/backward(False)``)
    and every backward accumulates into unsharded gradients (``set_requires_gradient_sync(False)``, its no_sync).
    Over gloo an all-gather twice per micro-batch and a reduce-scatter of the whole model after each cost more
    than the compute they serve, and even on one rank they are three full copies of weights and gradients per
    micro-batch (~8% of an actor update here). The price is a full copy of the weights and gradients on every rank
    until the step, which a host can afford and a GPU often cannot: on an accelerator every micro-batch gathers
    and reduces, as upstream does. When the block raises (a NaN loss), the unreduced gradients are dropped and the
    weights resharded, so nothing reaches a later step.
    """

    def __init__(self, module: torch.nn.Module, num_micro_batches: int) -> None:
        self.module = module
        self.num_micro_batches = num_micro_batches
        self.defer = holds_unsharded_on_host(module, num_micro_batches)

    def __enter__(self) -> GradientAccumulation:
        if self.defer:
            for unit in fsdp_modules(self.module):
                unit.set_reshard_after_forward(False, recurse=False)
                unit.set_reshard_after_backward(False, recurse=False)
        return self

    def before_backward(self, micro_idx: int) -> None:
        if self.defer:
            last = micro_idx == self.num_micro_batches - 1
            self.module.set_requires_gradient_sync(last)
            if last:
                self.module.set_reshard_after_backward(True)

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.defer:
            return
        if exc_type is not None:
            drop_unreduced_gradients(self.module)
        for unit in fsdp_modules(self.module):
            unit.reshard()
        restore_reshard_settings(self.module)
        self.module.set_requires_gradient_sync(True)


def holds_unsharded_on_host(module: torch.nn.Module, num_micro_batches: int) -> bool:
    """Whether a stretch of ``num_micro_batches`` forwards keeps the FSDP2 module's weights gathered (CPU only)."""
    return isinstance(module, FSDPModule) and num_micro_batches > 1 and module_device(module).type == "cpu"


def forwards_context(module: torch.nn.Module, num_micro_batches: int) -> contextlib.AbstractContextManager:
    """Around no-grad forwards over micro-batches (log-probs, values): the weights gathered once on CPU; elsewhere
    every unit is resharded when the stretch ends (``resharded_after``)."""
    if holds_unsharded_on_host(module, num_micro_batches):
        return unsharded(module)
    return resharded_after(module)


@contextlib.contextmanager
def resharded_after(module: torch.nn.Module):
    """Reshard every FSDP2 unit of ``module`` when the block ends, however it ends.

    The root unit keeps its weights gathered from forward to backward (``apply_fsdp2``: the LM head is the first
    thing backward needs). A no-grad forward has no backward, so without this the root would stay unsharded after
    a log-prob or value pass: the full embeddings and LM head held on every rank until the next backward, and for
    a frozen reference policy for the rest of the run, with ``named_parameters()`` showing plain tensors instead
    of the DTensor shards. The decoder layers reshard after each forward themselves; ``reshard`` on a sharded unit
    is a no-op."""
    try:
        yield
    finally:
        for unit in fsdp_modules(module):
            unit.reshard()


def clipped_optimizer_step(module: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float | None,
                           role: str) -> float:
    """Clip to ``grad_clip`` and step; a non-finite grad norm skips the step (grads zeroed). Returns the norm."""
    grad_norm = clip_grad_norm_(module.parameters(), max_norm=grad_clip)
    if math.isfinite(grad_norm):
        optimizer.step()
    else:
        logger.warning("%s grad norm is %s: skipping this optimizer step", role, grad_norm)
        optimizer.zero_grad()
    return grad_norm
