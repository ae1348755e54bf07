"""The trainer's reward-model stage (``reward_model.enable=true``): score the batch before the reward.

How the model score and the rule reward combine, as upstream verl does it:

- training: the reward-model worker writes ``rm_scores`` into the batch; every reward manager (naive, batch,
  dapo, prime) then returns ``rm_scores`` as the reward instead of calling compute_score
  (verl.workers.reward_manager.abstract.precomputed_scores). The model score *replaces* the rule score; they are
  not added. To combine both, write a reward manager (or a custom reward function that reads the batch) of your
  own. KL in the reward (algorithm.use_kl_in_reward) is applied to it afterwards as to any score.
- rows an agent loop already scored (``AgentLoopOutput.reward_score``, marked in ``__rm_scored__``) keep that
  score; the reward model scores the others, and a batch the agent loop scored whole is not sent to it.
- ReMax's greedy baseline is scored the same way, so baseline and samples are on the same scale.
- validation scores with the rule reward (the validation reward function), as upstream validates on rule-based
  rewards only: the validation accuracy stays the task's own measure even when training follows the model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto

__all__ = ["add_rm_scores"]

_SCORED = "__rm_scored__"


def add_rm_scores(batch: DataProto, rm_wg: Any) -> None:
    """Put the reward model's ``rm_scores`` (bs, response_length) into ``batch``, keeping agent-loop scores."""
    agent_scores = batch.batch["rm_scores"] if "rm_scores" in batch.batch.keys() else None
    marked = batch.non_tensor_batch.get(_SCORED)
    by_agent = None
    if agent_scores is not None:
        # without the marker every row carries an agent-loop score (upstream: rm_scores present -> no RM call)
        by_agent = np.ones(len(batch), dtype=bool) if marked is None else np.asarray(marked, dtype=bool)
        if by_agent.all():
            return
    model_scores = rm_wg.compute_rm_score(batch).batch["rm_scores"]
    if by_agent is not None:
        rows = torch.as_tensor(by_agent)[:, None]
        model_scores = torch.where(rows, agent_scores.to(model_scores.dtype), model_scores)
    batch.batch["rm_scores"] = model_scores
    if marked is not None:  # every row is scored now: the reward manager hands rm_scores through
        batch.non_tensor_batch[_SCORED] = np.ones(len(batch), dtype=object)
