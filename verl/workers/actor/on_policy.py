"""The actor's side of skipping the old-log-prob pass: the update's first forward stands in for it.

The trainer decides (``verl.trainer.config.old_log_prob_reuse``) and says so in the batch's meta_info under
``ON_POLICY_META_KEY``; the batch then carries no ``old_log_probs``. The actor (``DataParallelPPOActor``) uses each
micro-batch's own detached log-probs as ``old_log_probs`` — exact because the update takes one optimizer step
after all its forwards (checked here again on the worker's own batch) — and reports ``actor/entropy`` from those
forwards, aggregated over the whole batch as the driver did from the pass (``EntropyTally``).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from verl.algos import agg_loss
from verl.protocol import DataProto
from verl.workers.config import ActorConfig

__all__ = ["ON_POLICY_META_KEY", "EntropyTally", "check_single_step", "wants_on_policy"]

# meta_info flag set by the trainer when the old-log-prob pass was skipped (upstream's actor calls this on_policy)
ON_POLICY_META_KEY = "on_policy"


def wants_on_policy(data: DataProto) -> bool:
    """Whether ``data`` asks the update to use its first-forward log-probs as old_log_probs; refuses a batch that
    also carries old_log_probs (which of the two is pi_old would be ambiguous)."""
    if not data.meta_info.get(ON_POLICY_META_KEY, False):
        return False
    if data.batch is not None and "old_log_probs" in data.batch.keys():
        raise ValueError(f"update_actor: meta_info[{ON_POLICY_META_KEY!r}] says the old-log-prob pass was skipped, "
                         "but the batch carries old_log_probs; drop one of them")
    return True


def check_single_step(config: ActorConfig, rows: int) -> None:
    """The update must take exactly one optimizer step over these ``rows`` for its first forward to be pi_old's.

    ``config``: the actor's section with ``ppo_mini_batch_size`` already in responses per rank (the worker's).
    """
    if config.ppo_epochs != 1 or rows > config.ppo_mini_batch_size:
        raise ValueError(
            f"update_actor: the old-log-prob pass was skipped, which is exact only for one optimizer step, but "
            f"ppo_epochs={config.ppo_epochs} and {rows} rows on this rank with ppo_mini_batch_size="
            f"{config.ppo_mini_batch_size} (responses per rank); verl.trainer.config.old_log_prob_reuse must keep "
            "the pass for this config")


class EntropyTally:
    """``agg_loss(entropy, response_mask, loss_agg_mode)`` over the whole batch, from its micro-batches and ranks.

    Each micro-batch adds its aggregate weighted by its share of the batch's unit of averaging (tokens for
    token-mean, sequences with a valid token for the seq-mean modes, none for token-sum); the ranks' sums are
    all-reduced, so the value equals the driver's aggregate over the gathered batch.
    """

    def __init__(self, loss_agg_mode: str) -> None:
        self.loss_agg_mode = loss_agg_mode
        self._weighted = 0.0  # sum of micro aggregate x weight
        self._weight = 0.0

    def _weight_of(self, response_mask: torch.Tensor) -> float:
        if self.loss_agg_mode == "token-mean":
            return float(response_mask.sum().item())
        if self.loss_agg_mode == "token-sum":
            return 1.0 if bool(response_mask.any()) else 0.0
        return float((response_mask.sum(dim=-1) > 0).sum().item())  # seq-mean-*: agg_loss skips empty rows

    def add(self, entropy: torch.Tensor, response_mask: torch.Tensor) -> None:
        weight = self._weight_of(response_mask)
        if weight > 0:
            value = agg_loss(entropy.detach().float(), response_mask, self.loss_agg_mode).item()
            self._weighted += value * weight
            self._weight += weight

    def value(self, device: torch.device | str = "cpu") -> float | None:
        """The batch's aggregate; None when no rank saw a response token (nothing to report)."""
        totals = torch.tensor([self._weighted, self._weight], dtype=torch.float64, device=device)
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(totals, op=dist.ReduceOp.SUM)
        weighted, weight = totals.tolist()
        if weight <= 0:
            return None
        return weighted if self.loss_agg_mode == "token-sum" else weighted / weight
