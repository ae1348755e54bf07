"""What the trainer writes about its generations, beside the metrics (upstream's names and fields):

- trainer.rollout_data_dir / trainer.validation_data_dir: every sample of a step as one json line in
  `<dir>/<step>.jsonl`: input, output, gts, score, step, and each reward extra info;
- trainer.log_val_generations=N: N validation samples (input, output, score) to the loggers.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from verl.protocol import DataProto

# Upstream shuffles the sorted validation samples with this seed, so the N logged each time are the same prompts.
SAMPLE_SEED = 42


@dataclass
class Generations:
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    gts: list[Any] = field(default_factory=list)
    extra: dict[str, list] = field(default_factory=dict)

    def extend(self, other: Generations) -> None:
        self.inputs += other.inputs
        self.outputs += other.outputs
        self.scores += other.scores
        self.gts += other.gts
        for key, values in other.extra.items():
            self.extra.setdefault(key, []).extend(values)


def ground_truths(batch: DataProto) -> list[Any]:
    column = batch.non_tensor_batch.get("reward_model")  # a data row's column, not config
    if column is None:
        return [None] * len(batch)
    return [row.get("ground_truth") if isinstance(row, dict) else None for row in column]


def decode_generations(batch: DataProto, tokenizer: Any, scores: list[float], extra: dict[str, list]) -> Generations:
    return Generations(inputs=tokenizer.batch_decode(batch.batch["prompts"], skip_special_tokens=True),
                       outputs=tokenizer.batch_decode(batch.batch["responses"], skip_special_tokens=True),
                       scores=[float(s) for s in scores], gts=ground_truths(batch),
                       extra={k: list(v) for k, v in extra.items()})


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def dump_generations(directory: str, step: int, gens: Generations) -> str:
    """`<directory>/<step>.jsonl`, one line per sample; returns the file's path."""
    directory = os.path.abspath(os.path.expanduser(directory))
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{step}.jsonl")
    n = len(gens.inputs)
    columns = {"input": gens.inputs, "output": gens.outputs, "gts": gens.gts, "score": gens.scores,
               "step": [step] * n}
    columns.update({k: v for k, v in gens.extra.items() if len(v) == n})  # per-sample infos only
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({k: _plain(v[i]) for k, v in columns.items()}, ensure_ascii=False, default=str) + "\n")
    return path


def sample_generations(gens: Generations, n: int) -> list[tuple[str, str, float]]:
    """n (input, output, score) triples, the same prompts at every validation (sorted, then a fixed shuffle)."""
    samples = sorted(zip(gens.inputs, gens.outputs, gens.scores), key=lambda s: s[0])
    np.random.RandomState(SAMPLE_SEED).shuffle(samples)
    return [(str(i), str(o), float(s)) for i, o, s in samples[:n]]
