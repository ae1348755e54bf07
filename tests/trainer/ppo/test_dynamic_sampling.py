"""DAPO's dynamic sampling (algorithm.filter_groups, data.gen_batch_size): which groups are kept, how rounds fill a
step, the error after max_num_gen_batches, the config checks, and an exact resume of the data position when steps
draw several dataloader batches. The trainer runs its real loop and stages; only generation and scoring are fakes.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.config import load_config, validate_config
from verl.trainer.ppo.dynamic_sampling import (
    DataStream,
    DynamicSampler,
    attach_reward,
    attached_reward,
    kept_rows,
    metric_values,
)
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.state import TrainerState
from verl.utils.config_errors import ConfigError

SMALL = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_mini_batch_size=1",
         "critic.ppo_micro_batch_size_per_gpu=1", "trainer.logger=[]", "trainer.val_before_train=false",
         "trainer.test_freq=-1", "algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=2"]
DAPO = ["algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc"]


def typed(*overrides: str):
    return validate_config(load_config([*SMALL, *overrides]), check_files=False)


# ---------------------------------------------------------------- which groups are kept


def test_groups_with_equal_metric_are_dropped_and_singletons_kept():
    uids = np.array(["a", "a", "b", "b", "c", "d", "d", "d"], dtype=object)
    values = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.5, 0.25])
    rows, kept, seen = kept_rows(uids, values)
    assert rows == [0, 1, 4, 5, 6, 7]  # a (1 vs 0), c (alone), d (0.25 differs); b (all 1) dropped
    assert (kept, seen) == (3, 4)


def _scored(scores: list[float], uids: list[str], extra: dict | None = None) -> DataProto:
    batch = DataProto.from_dict(tensors={"responses": torch.zeros(len(scores), 3, dtype=torch.long)},
                                non_tensors={"uid": np.array(uids, dtype=object)})
    reward = torch.zeros(len(scores), 3)
    reward[:, -1] = torch.tensor(scores)
    attach_reward(batch, reward, extra or {})
    return batch


def test_metric_values_seq_reward_sums_the_scores_acc_comes_from_extra_info():
    batch = _scored([1.0, -0.5], ["a", "a"], {"acc": [True, False]})
    batch.batch["token_level_scores"][0, 0] = 0.25  # a score spread over tokens is summed
    assert metric_values(batch, "seq_reward").tolist() == [1.25, -0.5]
    assert metric_values(batch, "seq_final_reward").tolist() == [1.25, -0.5]  # no KL penalty before filtering
    assert metric_values(batch, "acc").tolist() == [1.0, 0.0]
    with pytest.raises(KeyError, match=r"metric=score: the reward manager reports no 'score'.*\['acc'\]"):
        metric_values(batch, "score")
    tensor, extra = attached_reward(batch)
    assert tensor.sum().item() == 0.75 and extra == {"acc": [True, False]}


# ---------------------------------------------------------------- rounds


def _rounds(per_round: list[list[tuple[str, list[float]]]]):
    """generate_and_score for DynamicSampler.collect: round k returns the given groups (uid, scores per response)."""
    calls = []

    def generate_and_score(batch_dict: dict) -> DataProto:
        groups = per_round[batch_dict["round"]]
        calls.append(batch_dict["round"])
        return _scored([s for _, scores in groups for s in scores], [u for u, scores in groups for _ in scores])

    return generate_and_score, calls


def test_rounds_continue_until_enough_prompts_then_cut_to_train_batch_times_n():
    generate_and_score, calls = _rounds([
        [("a", [1, 1]), ("b", [0, 1])],  # 1 of 2 kept
        [("c", [0, 0]), ("d", [0, 0])],  # none kept
        [("e", [1, 0]), ("f", [0, 1])],  # 2 kept: 3 in all, one more than needed
    ])
    metrics: dict[str, float] = {}
    sampler = DynamicSampler("seq_reward", max_num_gen_batches=0, train_batch_size=2, n=2)
    batch = sampler.collect({"round": 0}, iter([{"round": 1}, {"round": 2}]), generate_and_score, metrics)
    assert calls == [0, 1, 2]
    assert list(batch.non_tensor_batch["uid"]) == ["b", "b", "e", "e"]  # whole groups, in generation order
    assert metrics == {"train/num_gen_batches": 3, "train/num_gen_prompts": 6, "train/kept_group_ratio": 0.5}


def test_max_num_gen_batches_stops_with_what_to_change():
    generate_and_score, calls = _rounds([[("a", [1, 1])], [("b", [0, 1])], [("c", [0, 1])]])
    sampler = DynamicSampler("seq_reward", max_num_gen_batches=2, train_batch_size=2, n=2)
    with pytest.raises(RuntimeError) as info:
        sampler.collect({"round": 0}, iter([{"round": 1}, {"round": 2}]), generate_and_score, {})
    assert calls == [0, 1]
    message = str(info.value)
    assert "after 2 generation rounds (algorithm.filter_groups.max_num_gen_batches=2) only 1 of the 2" in message
    assert "raise max_num_gen_batches (0 means no limit)" in message


# ---------------------------------------------------------------- config


def test_filter_groups_config_checks():
    def problems(*overrides):
        with pytest.raises(ConfigError) as info:
            typed(*overrides)
        return str(info.value)

    assert "algorithm.filter_groups.enable=true needs algorithm.filter_groups.metric" in problems(
        "algorithm.filter_groups.enable=true")
    message = problems("data.train_batch_size=2", "data.gen_batch_size=4")
    assert "data.gen_batch_size=4 differs from data.train_batch_size=2" in message
    assert "set algorithm.filter_groups.enable=true" in message
    assert "metric=seq_final_reward with algorithm.use_kl_in_reward=true" in problems(
        *DAPO[:1], "algorithm.filter_groups.metric=seq_final_reward", "algorithm.use_kl_in_reward=true")
    assert "3 * 2 = 6 responses per generation round cannot be split evenly over 4 workers" in problems(
        *DAPO, "data.gen_batch_size=3", "trainer.n_gpus_per_node=4", "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2")
    assert "metric=acc with reward_model.enable=true" in problems(
        *DAPO[:1], "algorithm.filter_groups.metric=acc", "reward_model.enable=true", "reward_model.model.path=/tmp")
    config = typed(*DAPO, "data.train_batch_size=2", "algorithm.filter_groups.max_num_gen_batches=3")
    assert config.data.gen_batch_size is None and config.data.resolved_gen_batch_size == 2  # null: train_batch_size
    assert typed(*DAPO, "data.train_batch_size=2", "data.gen_batch_size=6").data.resolved_gen_batch_size == 6


# ---------------------------------------------------------------- the trainer: rounds, batch size, resume


def _collate(rows: list[dict]) -> dict:
    return {"x": torch.tensor([r["x"] for r in rows])}


def _reward_fn(data: DataProto, return_dict: bool = False):
    """Prompts whose number is divisible by 3 get responses that differ (one right, one wrong); others all wrong."""
    x = data.batch["x"]
    first = torch.zeros(len(data), dtype=torch.bool)
    first[::2] = True  # responses are interleaved per prompt: the first of each pair
    acc = ((x % 3 == 0) & first).float()
    reward = torch.zeros(len(data), 2)
    reward[:, -1] = acc
    return {"reward_tensor": reward, "reward_extra_info": {"acc": acc.tolist()}}


class _Trainer(RayPPOTrainer):
    """The real fit loop and dynamic-sampling stages; a response is the prompt's number, scored by _reward_fn."""

    def __init__(self, *overrides: str, saved: TrainerState | None = None) -> None:
        from torchdata.stateful_dataloader.sampler import RandomSampler

        dataset = [{"x": i} for i in range(12)]
        sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(7))
        super().__init__(typed(*DAPO, *overrides), tokenizer=None, role_worker_mapping={}, resource_pool_manager=None,
                         reward_fn=_reward_fn, train_dataset=dataset, collate_fn=_collate, train_sampler=sampler)
        self.actor_rollout_wg = types.SimpleNamespace(world_size=1)
        self.steps: list[list[int]] = []
        self.generated: list[int] = []
        self.saved, self.to_restore = {}, saved

    def _generate(self, batch: DataProto) -> DataProto:
        self.generated.extend(batch.batch["x"].tolist())
        out = batch.repeat(2, interleave=True)
        out.batch["responses"] = out.batch["x"][:, None].repeat(1, 2)
        return out

    def train_step(self, batch_dict: dict) -> dict[str, float]:
        metrics: dict[str, float] = {}
        batch = self._rollout(batch_dict, metrics)
        reward, _ = self._finish_reward(self._start_reward(batch))
        assert torch.equal(reward, batch.batch["token_level_scores"])  # the rounds' scores, not scored again
        self.steps.append(batch.batch["x"].tolist())
        return metrics

    def _save_checkpoint(self) -> None:
        self.saved[self.global_steps] = self.trainer_state()

    def _load_checkpoint(self) -> int:
        if self.to_restore is not None:
            self.restore_state(self.to_restore)
        return self.global_steps


def test_trainer_generates_gen_batch_size_prompts_per_round_and_trains_on_train_batch_size():
    trainer = _Trainer("data.train_batch_size=2", "data.gen_batch_size=3", "trainer.total_training_steps=3")
    trainer.fit()
    assert len(trainer.generated) % 3 == 0 and len(trainer.generated) > 3 * 3  # several rounds of 3 prompts
    for prompts in trainer.steps:
        assert len(prompts) == 2 * 2 and all(x % 3 == 0 for x in prompts)  # only prompts with signal, cut to 2 * n


def test_resume_continues_from_the_dataloader_position_after_multi_batch_steps(tmp_path):
    args = ("data.train_batch_size=2", "data.gen_batch_size=2", "trainer.save_freq=1", "trainer.total_training_steps=5")
    full = _Trainer(*args)
    full.fit()  # 12 prompts, 4 with signal: every step draws ~3 batches and epochs end mid-step
    assert len(full.generated) > 12  # more than one epoch was drawn

    first = _Trainer(*args[:-1], "trainer.total_training_steps=2")
    first.fit()
    first.saved[2].save(str(tmp_path))  # through the on-disk format
    resumed = _Trainer(*args, saved=TrainerState.load(str(tmp_path)))
    resumed.fit()
    assert first.steps + resumed.steps == full.steps
    assert first.generated + resumed.generated == full.generated  # not one prompt skipped or repeated


def test_data_stream_crosses_epochs_and_resumes_at_an_epoch_end():
    from torchdata.stateful_dataloader import StatefulDataLoader

    loader = StatefulDataLoader(list(range(4)), batch_size=2)
    stream = DataStream(loader)
    assert [next(stream).tolist() for _ in range(3)] == [[0, 1], [2, 3], [0, 1]]
    at_end = StatefulDataLoader(list(range(4)), batch_size=2)
    it = iter(at_end)
    next(it), next(it)
    state = at_end.state_dict()  # the epoch's last batch was taken
    again = StatefulDataLoader(list(range(4)), batch_size=2)
    again.load_state_dict(state)
    assert next(DataStream(again)).tolist() == [0, 1]  # the next epoch's first batch
