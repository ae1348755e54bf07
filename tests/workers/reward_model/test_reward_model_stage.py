"""verl.trainer.ppo.reward_model_stage.add_rm_scores and the reward it leads to: the model score replaces the rule
score (as upstream's reward managers do), and rows an agent loop scored keep their score."""

from __future__ import annotations

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.reward import compute_reward
from verl.trainer.ppo.reward_model_stage import add_rm_scores
from verl.workers.reward_manager.naive import NaiveRewardManager


class FakeRMGroup:
    """Stands in for the reward model's worker group: a known score per row on its last response token."""

    def __init__(self, scores: list[float]) -> None:
        self.scores = scores
        self.calls = 0

    def compute_rm_score(self, batch: DataProto) -> DataProto:
        self.calls += 1
        out = torch.zeros(batch.batch["responses"].shape)
        valid = batch.batch["attention_mask"][:, -out.size(1):].sum(-1)
        for i, n in enumerate(valid.tolist()):
            out[i, n - 1] = self.scores[i]
        return DataProto.from_dict(tensors={"rm_scores": out})


def _batch(rows: int = 3) -> DataProto:
    responses = torch.tensor([[5, 6, 2, 0], [7, 2, 0, 0], [8, 9, 9, 2]][:rows])
    response_mask = (torch.arange(4)[None] < torch.tensor([3, 2, 4][:rows])[:, None]).long()
    prompts = torch.tensor([[1, 3]] * rows)
    batch = DataProto.from_dict(
        tensors={"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
                 "attention_mask": torch.cat([torch.ones(rows, 2, dtype=torch.long), response_mask], 1),
                 "response_mask": response_mask},
        non_tensors={"data_source": np.array(["arithmetic"] * rows, dtype=object),
                     "reward_model": np.array([{"ground_truth": "1", "style": "rule"}] * rows, dtype=object)})
    return batch


class _Tok:
    """Decodes every response to the same text; the scoring function below gives it 1.0."""

    def decode(self, ids, skip_special_tokens=True):
        return "#### 1"

    def batch_decode(self, rows, skip_special_tokens=True):
        return [self.decode(ids) for ids in rows]


def _rule_reward():
    return NaiveRewardManager(tokenizer=_Tok(), num_examine=0, compute_score=lambda **kw: 1.0)


def test_model_scores_replace_the_rule_score():
    batch = _batch()
    add_rm_scores(batch, FakeRMGroup([0.5, -2.0, 3.0]))
    reward, _ = compute_reward(batch, _rule_reward())
    want = torch.tensor([[0, 0, 0.5, 0], [0, -2.0, 0, 0], [0, 0, 0, 3.0]])
    assert torch.equal(reward, want)  # not 1.5 / -1.0 / 4.0: upstream does not add the rule score
    plain, _ = compute_reward(_batch(), _rule_reward())  # without the reward model: the rule's 1.0 per row
    assert torch.equal(plain.sum(-1), torch.ones(3))


def test_agent_loop_scores_are_kept_and_the_model_scores_the_rest():
    batch = _batch()
    batch.batch["rm_scores"] = torch.tensor([[0, 0, 7.0, 0], [0, 0, 0, 0], [0, 0, 0, 0]])
    batch.non_tensor_batch["__rm_scored__"] = np.array([True, False, False], dtype=object)
    group = FakeRMGroup([0.5, -2.0, 3.0])
    add_rm_scores(batch, group)
    reward, _ = compute_reward(batch, _rule_reward())
    assert torch.equal(reward, torch.tensor([[0, 0, 7.0, 0], [0, -2.0, 0, 0], [0, 0, 0, 3.0]]))
    assert group.calls == 1


def test_a_batch_the_agent_loop_scored_whole_is_not_sent_to_the_model():
    batch = _batch()
    batch.batch["rm_scores"] = torch.tensor([[0, 0, 1.0, 0], [0, 2.0, 0, 0], [0, 0, 0, 3.0]])
    batch.non_tensor_batch["__rm_scored__"] = np.array([True, True, True], dtype=object)
    group = FakeRMGroup([9.0, 9.0, 9.0])
    add_rm_scores(batch, group)
    assert group.calls == 0
    assert torch.equal(batch.batch["rm_scores"].sum(-1), torch.tensor([1.0, 2.0, 3.0]))
