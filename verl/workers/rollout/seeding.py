"""Per-request sampling seeds for the vLLM engine, derived from where the request sits in the run.

vLLM's sampler otherwise draws its noise from the process's global generator, one draw per engine step for the
whole running batch: what a request samples then depends on which other requests shared its steps (the agent loop
batches by arrival time) and on everything else that drew from that generator since the engine started. A restarted
run cannot rely on that. Instead every sampled request carries its own seed (``SamplingParams(seed=...)``), a hash of

    (rollout seed, data-parallel rank, training step, validation or training, call within that step, row, turn)

so the same request in a resumed run draws exactly the same tokens as in the uninterrupted one, whatever it was
batched with. Nothing needs saving: the training step comes with every generate call (``meta_info['global_steps']``,
set by the trainer), and the call counter restarts at every new step, where a resume always starts. Calls without a
step (offline generation, direct use) are numbered from the engine's start.

Greedy requests (temperature 0) get no seed: they draw nothing, and a per-request generator would only cost time
(on GPUs vLLM falls back from its fused FlashInfer sampler for batches holding seeded requests).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

__all__ = ["CallSeeds", "SamplingSeeds", "derive_seed", "seeded"]

_SEED_BITS = 63  # vLLM seeds a torch.Generator with it: any non-negative int64


def derive_seed(*parts: int) -> int:
    """A seed from a tuple of ints: a hash, so neighbouring tuples give unrelated streams."""
    packed = struct.pack(f"<{len(parts)}q", *(int(p) for p in parts))
    digest = hashlib.blake2b(packed, digest_size=8, person=b"verl-rollout").digest()
    return int.from_bytes(digest, "little") & ((1 << _SEED_BITS) - 1)


@dataclass(frozen=True)
class CallSeeds:
    """The seeds of one generate call: one per (row of this rank's batch, turn of that row's trajectory)."""

    base: int

    def seed(self, row: int, turn: int = 0) -> int:
        return derive_seed(self.base, row, turn)


class SamplingSeeds:
    """The seed source of one rollout engine. ``dp_rank``: the engine's data-parallel rank (all tensor-parallel
    ranks of one engine share it, so they submit identical requests)."""

    def __init__(self, seed: int, dp_rank: int) -> None:
        self.seed = int(seed)
        self.dp_rank = int(dp_rank)
        self._calls: dict[tuple[int, int], int] = {}  # (step, validate) -> calls made; only the latest step kept

    def next_call(self, meta: dict[str, Any] | None) -> CallSeeds:
        """The seeds of the next generate call, given its meta_info (``global_steps``, ``validate``)."""
        meta = meta or {}
        step = meta.get("global_steps")
        validate = int(bool(meta.get("validate", False)))
        key = (-1 if step is None else int(step), validate)
        if any(k[0] != key[0] for k in self._calls):  # a new step: numbering restarts, as it does after a resume
            self._calls = {k: v for k, v in self._calls.items() if k[0] == key[0]}
        call = self._calls.get(key, 0)
        self._calls[key] = call + 1
        return CallSeeds(derive_seed(self.seed, self.dp_rank, key[0], key[1], call))


def seeded(params: dict[str, Any], seed: int) -> dict[str, Any]:
    """``params`` (vLLM SamplingParams fields) with ``seed`` added when the request samples and names no seed of
    its own (an agent loop may pass one explicitly: it wins)."""
    if params.get("seed") is not None or not float(params.get("temperature", 1.0)) > 0.0:
        return params
    return dict(params, seed=seed)
