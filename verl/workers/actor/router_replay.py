"""The actor's side of MoE router replay (``actor_rollout_ref.actor.router_replay.mode``): which of its passes
record and which replay, around DataParallelPPOActor's forwards. The hooks are verl.models.router_replay's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import torch

from verl.models.router_replay import ROUTED_EXPERTS_KEY, RouterReplay, flat_targets, unflatten_record
from verl.workers.config.actor import RefConfig

__all__ = ["ActorRouting", "routing_keys", "routed_micro_batch", "log_prob_pass", "update_pass"]


class ActorRouting:
    """What an actor with ``router_replay.mode`` R2 / R3 does around its forwards (verl.workers.actor.dp_actor).

    - the log-prob pass: R2 records every micro-batch (``take_records``: one (bs, L, layers, k) tensor per
      micro-batch, in micro-batch order); R3 replays the batch's ``routed_experts`` (the rollout's);
    - the update: both replay the batch's ``routed_experts``. Without them (R2 when the trainer skipped the
      old-log-prob pass: the update's first forward is pi_old's own, config.old_log_prob_reuse) the model routes
      itself; R3 without them is an error.
    ``packed``: the actor's use_remove_padding (which tokens the routers see).

    The reference policy's (``actor_rollout_ref.ref.router_replay.mode``, ``reference=True``) only replays: its
    log-prob pass runs after the actor's old-log-prob pass, so the batch's ``routed_experts`` are the ones the actor's
    R2 pass recorded, or the rollout's (R3); the reference then scores the tokens through the experts the policy
    chose."""

    def __init__(self, mode: str, model: torch.nn.Module, packed: bool, reference: bool = False) -> None:
        if mode not in ("R2", "R3"):
            raise ValueError(f"ActorRouting: mode must be R2 or R3, got {mode!r}")
        self.mode = mode
        self.packed = packed
        self.reference = reference
        self.replay = RouterReplay.of(model)
        self._phase: str | None = None  # "record" | "replay" | None (own routing)
        self._records: list[torch.Tensor] = []

    @classmethod
    def for_actor(cls, config, model: torch.nn.Module, packed: bool) -> ActorRouting | None:
        """None when the config has no router replay (mode disabled). A reference policy's (RefConfig) replays only."""
        section = getattr(config, "router_replay", None)
        mode = getattr(section, "mode", "disabled")
        if mode == "disabled":
            return None
        return cls(mode, model, packed, reference=isinstance(config, RefConfig))

    @contextmanager
    def log_prob_pass(self, has_record: bool) -> Iterator[None]:
        if self.mode == "R2" and not self.reference:
            self._records = []
            with self.replay.record():
                self._phase = "record"
                try:
                    yield
                finally:
                    self._phase = None
            return
        self._require(has_record, "compute_log_prob")
        with self._replaying():
            yield

    @contextmanager
    def update_pass(self, has_record: bool, on_policy: bool) -> Iterator[None]:
        if not has_record and self.mode == "R2" and on_policy:
            yield  # no old-log-prob pass: the update's forward is pi_old's, with the routing it chooses
            return
        self._require(has_record, "update_policy")
        with self._replaying():
            yield

    @contextmanager
    def micro_batch(self, micro_batch) -> Iterator[None]:
        """Around one micro-batch's forward (its TensorDict: attention_mask, and routed_experts when replaying)."""
        mask = micro_batch["attention_mask"]
        if self._phase == "replay":
            self.replay.set_replay(flat_targets(micro_batch[ROUTED_EXPERTS_KEY], mask, self.packed))
        yield
        if self._phase == "record":
            flat = self.replay.take_record()
            self._records.append(unflatten_record(flat, mask.to(flat.device), self.packed).cpu())

    def take_records(self) -> list[torch.Tensor]:
        records, self._records = self._records, []
        return records

    @contextmanager
    def _replaying(self) -> Iterator[None]:
        self._phase = "replay"
        try:
            yield
        finally:
            self._phase = None
            self.replay.clear()  # the module's next user (the rollout's generate) routes by itself

    def _require(self, has_record: bool, where: str) -> None:
        if not has_record and self.reference:
            raise ValueError(f"compute_ref_log_prob: actor_rollout_ref.ref.router_replay.mode={self.mode} replays the "
                             f"batch key {ROUTED_EXPERTS_KEY!r}, which the actor's "
                             f"{'old-log-prob pass (R2)' if self.mode == 'R2' else 'rollout (R3)'} records before the "
                             "reference pass; set actor_rollout_ref.actor.router_replay.mode to the same mode")
        if not has_record:
            source = ("the old-log-prob pass (compute_log_prob) records it" if self.mode == "R2" else
                      "the rollout records it with actor_rollout_ref.rollout.enable_rollout_routing_replay=true; "
                      "a custom agent loop must pass its engine output's routed_experts into its AgentLoopOutput")
            raise ValueError(f"{where}: actor_rollout_ref.actor.router_replay.mode={self.mode} needs the batch key "
                             f"{ROUTED_EXPERTS_KEY!r}; {source}")


def routing_keys(routing: ActorRouting | None, batch_keys) -> list[str]:
    """The extra batch keys an actor's pass selects: routed_experts when router replay is on and the batch has it."""
    return [ROUTED_EXPERTS_KEY] if routing is not None and ROUTED_EXPERTS_KEY in batch_keys else []


def routed_micro_batch(routing: ActorRouting | None, micro_batch):
    return routing.micro_batch(micro_batch) if routing is not None else nullcontext()


def log_prob_pass(routing: ActorRouting | None, batch_keys):
    return routing.log_prob_pass(ROUTED_EXPERTS_KEY in batch_keys) if routing is not None else nullcontext()


def update_pass(routing: ActorRouting | None, batch_keys, on_policy: bool):
    return (routing.update_pass(ROUTED_EXPERTS_KEY in batch_keys, on_policy) if routing is not None
            else nullcontext())
