"""data.validation_shuffle: the validation set is generated in a data.seed-seeded random order, a new permutation
each validation run and the same sequence of them in every run of the config; every prompt is still generated and
scored once, so the metrics over the whole set are those of the file order."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from tests.workers.reward_manager.conftest import make_batch
from verl.data import collate_fn
from verl.protocol import DataProto
from verl.trainer.config import load_config, validate_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.reward import load_reward_manager
from verl.trainer.ppo.validation import Validator

SAMPLES = [(f"{name} has {n}", f"#### {answer}", str(n + 2))
           for name, n, answer in (("Tom", 12, 14), ("Anna", 9, 10), ("Bo", 3, 5), ("Tom", 7, 9), ("Anna", 4, 4),
                                   ("Bo", 8, 10), ("Tom", 5, 1), ("Anna", 6, 8))]
SOURCES = ["openai/gsm8k", "arithmetic"] * 4
SMALL = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_mini_batch_size=1",
         "critic.ppo_micro_batch_size_per_gpu=1", "data.train_batch_size=2", "trainer.logger=[]",
         "data.val_batch_size=3"]  # several generation batches, so the order crosses batch boundaries


class _Rollout:
    """generate_sequences as a rollout would: each prompt's own fixed response, in the order the prompts came."""

    def __init__(self, batch: DataProto) -> None:
        self.batch = batch
        self.row_of = {tuple(p.tolist()): i for i, p in enumerate(batch.batch["prompts"])}
        self.orders: list[list[int]] = []

    def generate_sequences(self, gen: DataProto) -> DataProto:
        rows = [self.row_of[tuple(p.tolist())] for p in gen.batch["input_ids"]]
        self.orders.append(rows)
        return self.batch.select(batch_keys=["prompts", "responses", "input_ids", "attention_mask"])[rows]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def _validate(tokenizer, *overrides: str, runs: int = 2):
    """Metrics of ``runs`` validations over one trainer's val dataloader, and the order the prompts went in."""
    config = validate_config(load_config([*SMALL, *overrides]), check_files=False)
    batch, _ = make_batch(tokenizer, SAMPLES, data_source=SOURCES)
    prompt_len = batch.batch["prompts"].size(1)
    mask = batch.batch["attention_mask"][:, :prompt_len]
    rows = [{"input_ids": batch.batch["prompts"][i], "attention_mask": mask[i],
             "position_ids": torch.cumsum(mask[i], -1),
             **{k: v[i] for k, v in batch.non_tensor_batch.items()}} for i in range(len(batch))]
    host = SimpleNamespace(config=config)
    RayPPOTrainer._create_dataloader(host, list(range(4)), rows, collate_fn, None)
    validator = Validator(config, tokenizer, load_reward_manager(config, tokenizer, num_examine=0),
                          host.val_dataloader)
    rollout = _Rollout(batch)
    validator.bind(rollout)
    metrics = [validator.run(step) for step in range(runs)]
    orders = []
    for run in range(runs):  # three batches of at most 3 prompts per run
        batches = rollout.orders[3 * run: 3 * run + 3]
        assert [len(b) for b in batches] == [3, 3, 2]
        orders.append([row for b in batches for row in b])
    return metrics, orders


def test_validation_shuffle_changes_the_order_deterministically_and_not_the_metrics(tokenizer):
    in_order, file_order = _validate(tokenizer)
    assert file_order == [list(range(8))] * 2  # the default: the file order, every run
    metrics, orders = _validate(tokenizer, "data.validation_shuffle=true")
    assert all(sorted(order) == list(range(8)) for order in orders)  # every prompt once per run
    assert orders[0] != file_order[0] and orders[1] != orders[0]  # a new permutation each validation run
    again, orders_again = _validate(tokenizer, "data.validation_shuffle=true")
    assert orders_again == orders and again == metrics  # seeded by data.seed: the same in every run of the config
    _, other_seed = _validate(tokenizer, "data.validation_shuffle=true", "data.seed=7")
    assert other_seed != orders
    for shuffled, plain in zip(metrics, in_order):
        assert set(shuffled) == set(plain) and any(k.startswith("val-core/arithmetic/") for k in plain)
        for key, value in plain.items():
            assert shuffled[key] == pytest.approx(value, abs=1e-9), key
