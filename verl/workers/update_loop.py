"""The PPO update loop the actor and the critic share: mini-batches x epochs, micro-batches, gradient accumulation,
grad clip, the non-finite stop and the step metrics. Each role supplies only its per-micro-batch loss.

``config`` is the role's typed section (an FSDPActorConfig or a FSDPCriticConfig, batch sizes already normalised per rank by
the worker); the loop reads the keys both have: ppo_mini_batch_size, ppo_epochs, shuffle,
ppo_micro_batch_size_per_gpu, use_dynamic_bsz, ppo_max_token_len_per_gpu, loss_agg_mode and grad_clip.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from tensordict import TensorDict

from verl.protocol import DataProto
from verl.protocol.helpers import iterate_mini_batches
from verl.utils.metric import append_to_dict
from verl.workers.config import ActorConfig, CriticConfig
from verl.workers.micro_batching import (
    GradientAccumulation,
    clipped_optimizer_step,
    loss_share,
    make_micro_batches,
    metric_floats,
    module_device,
    stop_on_nonfinite_losses,
)
from verl.workers.nonfinite_grads import NonFiniteGradStreak

__all__ = ["MicroLoss", "enumerate_mini_batches", "ppo_update", "shuffle_seed"]

# (micro-batch on the module's device) -> (the micro-batch's loss under loss_agg_mode, its metrics: floats or 0-d
# tensors, read back once per optimizer step)
MicroLoss = Callable[[TensorDict], tuple[torch.Tensor, dict[str, float]]]


def shuffle_seed(data_loader_seed: int | None, update_calls: int) -> int:
    """The mini-batch shuffle's seed for a role's ``update_calls``-th update: its ``data_loader_seed`` (null: 0)
    mixed with the update's number, so each step draws its own order and the same seed repeats them."""
    return ((data_loader_seed or 0) * 1_000_003 + update_calls) % 2**63


def enumerate_mini_batches(data: DataProto, mini_batch_size: int, epochs: int, shuffle: bool,
                           seed: int) -> Iterator[tuple[int, int, DataProto]]:
    """(epoch, index, mini-batch) over ``DataProto``'s own iterator; with ``shuffle`` every epoch draws a fresh
    permutation from one generator seeded by ``seed``. A length that ``mini_batch_size`` does not divide ends each
    epoch with a smaller mini-batch."""
    if not isinstance(mini_batch_size, int) or mini_batch_size < 1:
        raise ValueError(f"ppo_mini_batch_size must be a positive int (per-rank responses), got {mini_batch_size!r}")
    generator = torch.Generator()
    generator.manual_seed(seed)
    per_epoch = math.ceil(len(data) / mini_batch_size)
    for n, mini in enumerate(iterate_mini_batches(data, mini_batch_size, epochs, shuffle, generator)):
        yield n // per_epoch, n % per_epoch, mini


def ppo_update(config: ActorConfig | CriticConfig, role: str, module: torch.nn.Module, optimizer: torch.optim.Optimizer, data: DataProto,
               micro_loss: MicroLoss, update_call: int,
               nonfinite_streak: NonFiniteGradStreak | None = None) -> dict[str, list[float]]:
    """Run the role's update over ``data``; returns metric lists: the micro-batch metrics, then per optimizer step
    ``{role}/grad_norm`` and ``{role}/grad_norm_nonfinite``.

    Micro-batch losses are weighted by their share of the mini-batch (``loss_share``), so the accumulated gradient
    is the mini-batch loss's whatever the micro-batch size. Raises NonFiniteLossError when a micro-batch loss is
    NaN/inf (grads zeroed, no step). A non-finite grad norm alone skips that optimizer step and is recorded; with
    ``nonfinite_streak``, the streak's limit of consecutive skips raises NonFiniteGradError (nonfinite_grads.py).
    ``update_call``: the role's update count; with ``config.data_loader_seed`` it seeds the mini-batch shuffle.
    """
    module.train()
    seed = shuffle_seed(getattr(config, "data_loader_seed", None), update_call)
    device = module_device(module)
    metrics: dict[str, list] = {}
    what = f"{role}.ppo_micro_batch_size_per_gpu / {role}.ppo_max_token_len_per_gpu"
    for epoch, mini_idx, mini_batch in enumerate_mini_batches(data, config.ppo_mini_batch_size, config.ppo_epochs,
                                                              config.shuffle, seed):
        micro_batches, _ = make_micro_batches(mini_batch.batch, config.ppo_micro_batch_size_per_gpu,
                                              config.use_dynamic_bsz, config.ppo_max_token_len_per_gpu, what)
        mini_mask = mini_batch.batch["response_mask"]
        optimizer.zero_grad()
        losses, records, logged = [], [], []
        with GradientAccumulation(module, len(micro_batches)) as accumulation:
            for micro_idx, micro_batch in enumerate(micro_batches):
                # the share from the host's masks, before the copy: no device sync
                share = loss_share(micro_batch["response_mask"], mini_mask, config.loss_agg_mode)
                micro_loss_value, micro_metrics = micro_loss(micro_batch.to(device))
                loss = micro_loss_value * share
                accumulation.before_backward(micro_idx)
                loss.backward()
                losses.append(loss.detach())
                records.append(micro_metrics)
                logged.append(share > 0)  # a micro-batch without response tokens adds nothing worth logging
            where = f"epoch {epoch}, mini-batch {mini_idx}, micro-batch "
            stop_on_nonfinite_losses(losses, optimizer, role, lambda i, where=where: f"{where}{i}", records)
        for micro_metrics, keep in zip(metric_floats(records), logged):
            if keep:
                append_to_dict(metrics, micro_metrics)
        grad_norm = clipped_optimizer_step(module, optimizer, config.grad_clip, role)
        append_to_dict(metrics, {f"{role}/grad_norm": grad_norm,
                                 f"{role}/grad_norm_nonfinite": 0.0 if math.isfinite(grad_norm) else 1.0})
        if nonfinite_streak is not None:
            nonfinite_streak.record(grad_norm, f"update call {update_call}, epoch {epoch}, mini-batch {mini_idx}")
    optimizer.zero_grad()
    return metrics
