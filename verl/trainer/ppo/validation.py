"""Validation: generate on the held-out prompts with `rollout.val_kwargs`, score them, report per data source.

Metric names follow upstream verl: `val-core/<data_source>/reward/mean@N` (the headline number; with greedy
decoding and N=1 it is pass@1 accuracy for 0/1 rewards), `val-aux/...` for the rest.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from omegaconf import DictConfig

from verl.protocol import DataProto
from verl.trainer.ppo.metric_utils import process_validation_metrics
from verl.trainer.ppo.reward import compute_reward


class Validator:
    def __init__(self, config: DictConfig, tokenizer, val_reward_fn, val_dataloader) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.reward_fn = val_reward_fn
        self.dataloader = val_dataloader
        self.wg = None
        self.last_generations: list[dict[str, Any]] = []

    @property
    def enabled(self) -> bool:
        return self.reward_fn is not None and self.dataloader is not None

    def bind(self, actor_rollout_wg) -> None:
        self.wg = actor_rollout_wg

    def run(self, step: int) -> dict[str, float]:
        val_kwargs = self.config.actor_rollout_ref.rollout.val_kwargs
        n = int(val_kwargs.get("n", 1))
        sources: list[str] = []
        inputs: list[str] = []
        scores: list[float] = []
        extra: dict[str, list] = {}
        self.last_generations = []
        for batch_dict in self.dataloader:
            batch = DataProto.from_single_dict(batch_dict).repeat(n, interleave=True)
            gen = batch.pop(batch_keys=["input_ids", "attention_mask", "position_ids"])
            gen.meta_info.update({"eos_token_id": self.tokenizer.eos_token_id, "pad_token_id": self.tokenizer.pad_token_id,
                                  "do_sample": bool(val_kwargs.get("do_sample", False)), "validate": True,
                                  "global_steps": step})
            batch = batch.union(self.wg.generate_sequences(gen))
            reward_tensor, reward_extra = compute_reward(batch, self.reward_fn)
            scores.extend(reward_tensor.sum(-1).tolist())
            for key, values in reward_extra.items():
                extra.setdefault(key, []).extend(values)
            key = self.config.data.get("reward_fn_key", "data_source")
            sources.extend(str(s) for s in batch.non_tensor_batch.get(key, np.array(["unknown"] * len(batch))))
            prompts = self.tokenizer.batch_decode(batch.batch["prompts"], skip_special_tokens=True)
            inputs.extend(prompts)
            self._keep_samples(batch, prompts, reward_tensor.sum(-1).tolist())
        infos = {"reward": scores}
        infos.update({k: v for k, v in extra.items() if len(v) == len(scores)})
        return _flatten(process_validation_metrics(sources, inputs, infos))

    def _keep_samples(self, batch: DataProto, prompts: list[str], scores: list[float]) -> None:
        k = int(self.config.trainer.get("log_val_generations", 0) or 0)
        if k <= 0:
            return
        responses = self.tokenizer.batch_decode(batch.batch["responses"], skip_special_tokens=True)
        for prompt, response, score in list(zip(prompts, responses, scores))[:k]:
            self.last_generations.append({"input": prompt, "output": response, "score": score})


def _flatten(nested: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    """`val-core/<source>/<var>/mean@N` for the reward (or acc) headline; `val-aux/...` for everything else."""
    out: dict[str, float] = {}
    for source, variables in nested.items():
        for var, metrics in variables.items():
            for name, value in metrics.items():
                core = var in ("reward", "acc") and name.startswith("mean@")
                out[f"{'val-core' if core else 'val-aux'}/{source}/{var}/{name}"] = float(value)
    return out
