"""The trainer's reward function under ``reward_model.use_reward_loop=true``.

``RewardLoopManager`` wraps the reward manager the config names: a per-sample one (``RewardManagerBase``: the
``rate_limited`` judge manager, or a class from ``reward_model.reward_loop_source=importlib``) as it is, a batch one
(naive, dapo, prime, batch, ...) through ``BatchManagerAdapter``. It is called like every reward manager,
``manager(data, return_dict=True)``:

- rows the rollout already scored (``rm_scores``, from the agent loop's reward loop: ``spec()`` is what the trainer
  sends with each generation batch) are handed through, with their extra info;
- otherwise (``rollout.mode=sync``, validation, a batch without scores) every row is scored through a session here,
  ``num_workers`` at a time, after generation.

``RewardLoopWorker`` is upstream's per-sample entry (``compute_score`` for one row, ``compute_score_batch``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.protocol import DataProto
from verl.workers.reward_loop.adapter import BatchManagerAdapter
from verl.workers.reward_loop.base import RewardManagerBase, SampleScore, check_sample_score
from verl.workers.reward_loop.merge import merge_sample_scores
from verl.workers.reward_loop.session import RewardLoopSpec
from verl.workers.reward_manager.abstract import precomputed_scores
from verl.workers.reward_manager.batch_text import valid_response_lengths

__all__ = ["RewardLoopManager", "RewardLoopWorker", "scores_to_batch"]


def _per_sample(manager: Any, num_workers: int) -> RewardManagerBase:
    return manager if isinstance(manager, RewardManagerBase) else BatchManagerAdapter(manager, num_workers)


def scores_to_batch(results: list[SampleScore], data: DataProto) -> DataProto:
    """``rm_scores`` (the score on each row's last real token), one column per extra-info key and
    ``meta_info["reward_extra_keys"]``: what upstream's reward loop returns and every reward manager hands through."""
    responses = data.batch["responses"]
    reward_tensor, extra = merge_sample_scores(results, valid_response_lengths(data).tolist(), responses.shape[-1])
    columns = {}
    for key, values in extra.items():
        column = np.empty(len(values), dtype=object)
        column[:] = values
        columns[key] = column
    return DataProto(batch=TensorDict({"rm_scores": reward_tensor}, batch_size=[len(data)]),
                     non_tensor_batch=columns, meta_info={"reward_extra_keys": list(extra)})


class RewardLoopWorker:
    """Scores one sample (a one-row DataProto) with the per-sample manager; ``compute_score_batch`` all rows at once."""

    def __init__(self, manager: Any, num_workers: int = 1) -> None:
        self.reward_loop = _per_sample(manager, num_workers)

    async def compute_score(self, data: DataProto) -> SampleScore:
        if len(data) != 1:
            raise ValueError(f"RewardLoopWorker.compute_score scores one sample; got {len(data)} rows")
        return check_sample_score(await self.reward_loop.run_single(data), type(self.reward_loop).__name__)

    async def compute_score_batch(self, data: DataProto) -> list[SampleScore]:
        return list(await asyncio.gather(*[self.compute_score(data[i:i + 1]) for i in range(len(data))]))


class RewardLoopManager:
    """``manager``: the reward manager of reward_model.reward_manager; ``num_workers``: samples scored at once."""

    def __init__(self, manager: Any, num_workers: int = 1) -> None:
        self.manager = _per_sample(manager, num_workers)
        self.num_workers = max(1, int(num_workers))
        self._spec = RewardLoopSpec(self.manager, self.num_workers)

    @property
    def tokenizer(self) -> Any:
        return self.manager.tokenizer

    def spec(self) -> RewardLoopSpec:
        """What the rollout needs to score each sample as it finishes (sent in the generation batch's meta_info)."""
        return self._spec

    def compute_rm_score(self, data: DataProto) -> DataProto:
        """Every row scored through the loop: ``rm_scores`` + extra-info columns + ``reward_extra_keys``."""
        session = self._spec.session()
        try:
            for index in range(len(data)):
                session.submit(index, data[index:index + 1])
            results = session.finish(len(data))
        finally:
            session.close()
        return scores_to_batch(results, data)

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        precomputed = precomputed_scores(data, return_dict)
        if precomputed is not None:
            return precomputed
        scored = self.compute_rm_score(data)
        reward_tensor = scored.batch["rm_scores"].to(data.batch["responses"].device)
        if not return_dict:
            return reward_tensor
        extra = {key: list(scored.non_tensor_batch[key]) for key in scored.meta_info["reward_extra_keys"]}
        return {"reward_tensor": reward_tensor, "reward_extra_info": extra}

    def close(self) -> None:
        self.manager.close()


def attach_loop_scores(batch: DataProto, results: list[SampleScore]) -> DataProto:
    """The rollout batch with the loop's scores on it (see ``scores_to_batch``). Rows an agent loop scored itself
    (``__rm_scored__``) keep that score, as on the batch path; every row is then marked scored."""
    scored = scores_to_batch(results, batch)
    rm_scores = scored.batch["rm_scores"]
    if "__rm_scored__" in batch.non_tensor_batch and "rm_scores" in batch.batch.keys():
        own = torch.as_tensor(np.asarray(batch.non_tensor_batch["__rm_scored__"], dtype=bool))
        rm_scores[own] = batch.batch["rm_scores"][own].to(rm_scores.dtype)
    batch.batch["rm_scores"] = rm_scores
    batch.non_tensor_batch.update(scored.non_tensor_batch)
    column = np.empty(len(batch), dtype=object)
    column[:] = [True] * len(batch)
    batch.non_tensor_batch["__rm_scored__"] = column
    batch.meta_info["reward_extra_keys"] = scored.meta_info["reward_extra_keys"]
    return batch
