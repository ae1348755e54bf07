"""fit() stops at a failing step with the step number on the error, and writes no checkpoint from it."""

from __future__ import annotations

import pytest

from verl.trainer.config.validate import load_config, validate_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.workers.micro_batching import NonFiniteLossError

# batches of 2 prompts pass validation with one worker and mini-batches of one prompt
SMALL = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_mini_batch_size=1",
         "critic.ppo_micro_batch_size_per_gpu=1"]


class _Trainer(RayPPOTrainer):
    """The real loop; the stages a Ray run would execute are replaced by a step that fails at step 2."""

    def __init__(self, config) -> None:
        super().__init__(config, tokenizer=None, role_worker_mapping={}, resource_pool_manager=None,
                         train_dataset=[{"x": i} for i in range(8)], collate_fn=lambda rows: rows)
        self.saved: list[int] = []

    def train_step(self, batch_dict):
        if self.global_steps == 2:  # what the actor worker raises on a NaN loss
            raise NonFiniteLossError("actor: non-finite loss nan at epoch 0, mini-batch 0, micro-batch 1")
        return {"actor/pg_loss": 0.5}

    def _save_checkpoint(self) -> None:
        self.saved.append(self.global_steps)

    def _load_checkpoint(self) -> int:
        return 0


def test_nan_loss_stops_fit_with_the_step_and_no_checkpoint_from_it():
    config = validate_config(load_config([
        "data.train_batch_size=2", "trainer.total_training_steps=4", "trainer.save_freq=1",
        "trainer.val_before_train=false", "trainer.test_freq=-1", "trainer.logger=[]", *SMALL]), check_files=False)
    trainer = _Trainer(config)
    with pytest.raises(NonFiniteLossError) as info:
        trainer.fit()
    assert "micro-batch 1" in str(info.value)
    assert info.value.__notes__ == ["during training step 2; no checkpoint was written from this step"]
    assert trainer.saved == [1]  # step 1 was saved, step 2 (and its weights) never


class _Validator:
    enabled = True

    def run(self, step: int) -> dict[str, float]:
        return {"val-core/arithmetic/reward/mean@1": 0.25}


class _Tracker:
    def __init__(self) -> None:
        self.logged: list[tuple[int, dict]] = []

    def log(self, data: dict, step: int) -> None:
        self.logged.append((step, dict(data)))


class _ResumedTrainer(_Trainer):
    def train_step(self, batch_dict):
        return {"actor/pg_loss": 0.5}

    def _load_checkpoint(self) -> int:
        self.global_steps = 3  # as checkpointing.load_checkpoint sets it
        return 3


def test_validation_before_training_is_logged_at_the_step_a_resumed_run_starts_from():
    config = validate_config(load_config(["data.train_batch_size=2", "trainer.total_training_steps=4",
                                          "trainer.test_freq=-1", "trainer.logger=[]", *SMALL]), check_files=False)
    trainer = _ResumedTrainer(config)
    trainer.validator, trainer.tracker = _Validator(), _Tracker()
    trainer.fit()
    assert [step for step, _ in trainer.tracker.logged] == [3, 4]
    assert "val-core/arithmetic/reward/mean@1" in trainer.tracker.logged[0][1]
