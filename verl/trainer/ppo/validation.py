"""Validation: generate on the held-out prompts with `rollout.val_kwargs`, score them, report per data source.

Metric names follow upstream verl: `val-core/<data_source>/reward/mean@N` (the headline number; with greedy
decoding and N=1 it is pass@1 accuracy for 0/1 rewards), `val-aux/...` for the rest.
"""

from __future__ import annotations

import numpy as np

from verl.protocol import DataProto
from verl.trainer.config import PPOTrainerConfig
from verl.trainer.ppo.agent_rollout import pop_agent_metrics, pop_generation_input
from verl.trainer.ppo.generations import Generations, decode_generations, dump_generations
from verl.trainer.ppo.metric_utils import process_validation_metrics
from verl.trainer.ppo.reward import compute_reward
from verl.workers.rollout.agent_loop.base import with_template_kwargs, with_trace_names


class Validator:
    def __init__(self, config: PPOTrainerConfig, tokenizer, val_reward_fn, val_dataloader) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.reward_fn = val_reward_fn
        self.dataloader = val_dataloader
        self.wg = None
        # every sample of the last run(): what trainer.log_val_generations picks from
        self.last_generations = Generations()

    @property
    def enabled(self) -> bool:
        return self.reward_fn is not None and self.dataloader is not None

    def bind(self, actor_rollout_wg) -> None:
        self.wg = actor_rollout_wg

    def run(self, step: int) -> dict[str, float]:
        val_kwargs = self.config.actor_rollout_ref.rollout.val_kwargs
        reward_fn_key = self.config.data.reward_fn_key
        sources: list[str] = []
        gens = Generations()
        agent: list[tuple[int, dict[str, float]]] = []  # (rows, agent-loop metrics) per batch
        for batch_dict in self.dataloader:
            batch = DataProto.from_single_dict(batch_dict).repeat(val_kwargs.n, interleave=True)
            gen = pop_generation_input(batch, self.config.actor_rollout_ref.rollout.mode)
            gen.meta_info.update(with_trace_names(with_template_kwargs(
                {"eos_token_id": self.tokenizer.eos_token_id, "pad_token_id": self.tokenizer.pad_token_id,
                 "do_sample": val_kwargs.do_sample, "validate": True, "global_steps": step}, self.config.data),
                self.config))
            batch = batch.union(self.wg.generate_sequences(gen))
            agent.append((len(batch), pop_agent_metrics(batch)))
            reward_tensor, reward_extra = compute_reward(batch, self.reward_fn)
            gens.extend(decode_generations(batch, self.tokenizer, reward_tensor.sum(-1).tolist(), reward_extra))
            column = batch.non_tensor_batch.get(reward_fn_key, np.array(["unknown"] * len(batch)))  # a data column
            sources.extend(str(s) for s in column)
        self.last_generations = gens
        if self.config.trainer.validation_data_dir:
            dump_generations(self.config.trainer.validation_data_dir, step, gens)
        infos = {"reward": gens.scores}
        infos.update({k: v for k, v in gens.extra.items() if len(v) == len(gens.scores)})
        return {**_flatten(process_validation_metrics(sources, gens.inputs, infos)), **_agent_means(agent)}


def _flatten(nested: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    """`val-core/<source>/<var>/mean@N` for the reward (or acc) headline; `val-aux/...` for everything else."""
    out: dict[str, float] = {}
    for source, variables in nested.items():
        for var, metrics in variables.items():
            for name, value in metrics.items():
                core = var in ("reward", "acc") and name.startswith("mean@")
                out[f"{'val-core' if core else 'val-aux'}/{source}/{var}/{name}"] = float(value)
    return out


def _agent_means(batches: list[tuple[int, dict[str, float]]]) -> dict[str, float]:
    """The agent loop's per-batch means, weighted by rows, as `val-aux/agent/...` (e.g. tool calls per sample)."""
    names = {k for _, m in batches for k in m if k.endswith("/mean")}
    out = {}
    for name in names:
        rows = [(n, m[name]) for n, m in batches if name in m]
        out[f"val-aux/{name}"] = sum(n * v for n, v in rows) / max(1, sum(n for n, _ in rows))
    return out
