"""RayPPOTrainer.fit's checkpoint/resume logic with the real loop and dataloader, and stand-in worker groups.

The workers are replaced by objects that count training steps and write that count as their "weights", so the
tests see exactly which batches a resumed run trains on and what state it resumed from, in milliseconds.
"""

from __future__ import annotations

import json
import os

import pytest
import torch
from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler

from verl.checkpoint import read_tracker
from verl.trainer.config import load_config, validate_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

DATASET = [{"idx": i} for i in range(6)]  # batch 2 -> 3 steps per epoch
# batches of 2 (or 3) prompts pass validation with one worker and mini-batches of one prompt
SMALL = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_mini_batch_size=1",
         "critic.ppo_micro_batch_size_per_gpu=1"]


class FakeRoleGroup:
    """Saves/loads the number of steps it has trained; can be told to die in the middle of a save."""

    world_size = 2

    def __init__(self, name: str) -> None:
        self.name = name
        self.trained_steps = 0
        self.die_on_save_of_step: int | None = None

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None) -> None:
        os.makedirs(local_path)
        with open(os.path.join(local_path, "weights.json"), "w") as f:
            json.dump({"trained_steps": self.trained_steps}, f)
        if global_step == self.die_on_save_of_step:
            raise RuntimeError(f"{self.name} died while saving step {global_step}")
        open(os.path.join(local_path, "manifest.json"), "w").write("{}")

    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False) -> None:
        with open(os.path.join(local_path, "weights.json")) as f:
            self.trained_steps = json.load(f)["trained_steps"]


def stateful_sampler():
    return StatefulRandomSampler(DATASET, generator=torch.Generator().manual_seed(1))


def make_trainer(root, total_steps=7, save_freq=3, sampler=stateful_sampler, batch_size=2,
                 **trainer_keys) -> RayPPOTrainer:
    overrides = [f"data.train_batch_size={batch_size}", f"trainer.total_training_steps={total_steps}",
                 f"trainer.save_freq={save_freq}", f"trainer.default_local_dir={root}", "trainer.logger=[console]",
                 "algorithm.adv_estimator=gae", "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive",
                 *SMALL]
    overrides += [f"trainer.{k}={v}" for k, v in trainer_keys.items()]
    config = validate_config(load_config(overrides), check_files=False)
    trainer = RayPPOTrainer(config, tokenizer=None, role_worker_mapping={}, resource_pool_manager=None,
                            train_dataset=DATASET, train_sampler=sampler())
    trainer.actor_rollout_wg, trainer.critic_wg = FakeRoleGroup("actor"), FakeRoleGroup("critic")
    trainer.seen: list[tuple[int, list[int]]] = []
    trainer.resumed_with: list[int] = []

    def train_step(batch_dict):
        if not trainer.seen:  # the first step of this process: what did the workers resume from?
            trainer.resumed_with.append(trainer.actor_rollout_wg.trained_steps)
        trainer.seen.append((trainer.global_steps, batch_dict["idx"].tolist()))
        trainer.actor_rollout_wg.trained_steps += 1
        trainer.critic_wg.trained_steps += 1
        trainer.kl_ctrl_in_reward.value *= 1.5  # the adaptive controller moves every step
        return {}

    trainer.train_step = train_step
    return trainer


@pytest.fixture
def uninterrupted(tmp_path):
    trainer = make_trainer(str(tmp_path / "full"), save_freq=-1)
    trainer.fit()
    return trainer


def test_resume_after_the_last_step_of_an_epoch_starts_the_next_epoch(tmp_path, uninterrupted):
    root = str(tmp_path / "run")
    first = make_trainer(root, total_steps=3)  # stops (and saves) after the last step of epoch 1
    first.fit()
    assert read_tracker(root) == 3
    resumed = make_trainer(root)
    resumed.fit()
    assert [s for s, _ in resumed.seen] == [4, 5, 6, 7]
    assert resumed.seen == uninterrupted.seen[3:]  # epoch 2's order, then the first batch of epoch 3
    assert resumed.resumed_with == [3]
    assert resumed.kl_ctrl_in_reward.value == pytest.approx(uninterrupted.kl_ctrl_in_reward.value)


def test_resume_mid_epoch_replays_the_rest_of_that_epoch(tmp_path, uninterrupted):
    root = str(tmp_path / "run")
    make_trainer(root, total_steps=5, save_freq=5).fit()  # step 5 is the middle of epoch 2
    resumed = make_trainer(root)
    resumed.fit()
    assert resumed.seen == uninterrupted.seen[5:]


def test_resume_mid_epoch_with_the_sampler_main_ppo_builds(tmp_path):
    from verl.data.rl_loading import create_rl_sampler
    from verl.trainer.config import DataConfig

    def sampler():
        return create_rl_sampler(DataConfig(shuffle=True, seed=1), DATASET)

    full = make_trainer(str(tmp_path / "full"), save_freq=-1, sampler=sampler)
    full.fit()
    make_trainer(str(tmp_path / "run"), total_steps=5, save_freq=5, sampler=sampler).fit()
    resumed = make_trainer(str(tmp_path / "run"), sampler=sampler)
    resumed.fit()
    assert resumed.seen == full.seen[5:]


def test_a_crash_during_a_save_keeps_the_previous_checkpoint(tmp_path, uninterrupted):
    root = str(tmp_path / "run")
    crashing = make_trainer(root, save_freq=2)
    crashing.critic_wg.die_on_save_of_step = 4  # the actor's part of step 4 is on disk, the critic's is not
    with pytest.raises(RuntimeError, match="died while saving step 4"):
        crashing.fit()
    assert read_tracker(root) == 2
    assert sorted(os.listdir(root)) == ["global_step_2", "latest_checkpointed_iteration.txt",  # partial removed
                                        "run.lock"]
    # what a kill -9 would have left behind is removed on the next start
    os.makedirs(os.path.join(root, "global_step_4.tmp-0123abcd", "actor"))
    resumed = make_trainer(root, save_freq=2)
    resumed.fit()
    assert not any(".tmp-" in name for name in os.listdir(root))  # the partial save was cleaned up
    assert resumed.resumed_with == [2] and resumed.seen == uninterrupted.seen[2:]
    assert sorted(os.listdir(root)) == ["global_step_2", "global_step_4", "global_step_6", "global_step_7",
                                        "latest_checkpointed_iteration.txt", "run.lock"]
    assert sorted(os.listdir(os.path.join(root, "global_step_4"))) == ["actor", "critic", "data.pt",
                                                                       "run_identity.json", "trainer_state.pt"]


def test_retention_keeps_the_newest_and_never_the_current(tmp_path):
    root = str(tmp_path / "run")
    make_trainer(root, save_freq=1, max_actor_ckpt_to_keep=2, max_critic_ckpt_to_keep=3).fit()
    assert read_tracker(root) == 7
    steps = sorted(int(n.split("_")[-1]) for n in os.listdir(root) if n.startswith("global_step_"))
    assert steps == [5, 6, 7]  # the critic keeps 3; the actor 2 of them
    assert not os.path.exists(os.path.join(root, "global_step_5", "actor"))
    assert os.path.isdir(os.path.join(root, "global_step_5", "critic"))


def test_resume_modes(tmp_path):
    root = str(tmp_path / "run")
    make_trainer(root, total_steps=4, save_freq=2).fit()  # checkpoints at 2 and 4
    fresh = make_trainer(root, resume_mode="disable")
    fresh.fit()
    assert fresh.seen[0][0] == 1 and fresh.resumed_with == [0]
    picked = make_trainer(root, resume_mode="resume_path", resume_from_path=os.path.join(root, "global_step_2"))
    picked.fit()
    assert picked.seen[0][0] == 3 and picked.resumed_with == [2]
    with pytest.raises(ValueError, match="must be global_step_<N>"):
        make_trainer(root, resume_mode="resume_path", resume_from_path=root).fit()
    with pytest.raises(ValueError, match="needs trainer.resume_from_path"):
        make_trainer(root, resume_mode="resume_path").fit()


def test_the_report_shows_a_fresh_run_only_and_a_resumed_run_whole(tmp_path):
    from verl.trainer.tracking import Tracking

    root, logs = str(tmp_path / "run"), str(tmp_path / "report")

    def fit(**keys):
        trainer = make_trainer(root, **keys)
        trainer.tracker = Tracking("p", "e", default_backend=["file"], log_dir=logs)
        step = trainer.train_step
        trainer.train_step = lambda batch: {**step(batch), "x": 1.0}  # something to log
        trainer.fit()
        trainer.tracker.finish()
        return [json.loads(line)["step"] for line in open(os.path.join(logs, "metrics.jsonl"))]

    assert fit(total_steps=4, save_freq=2) == [1, 2, 3, 4]
    assert fit(total_steps=6, save_freq=2) == [1, 2, 3, 4, 5, 6]  # resumed at 4: the same file goes on
    assert fit(total_steps=2, save_freq=2, resume_mode="disable") == [1, 2]  # from scratch: its own steps only
    (aside,) = [f for f in os.listdir(logs) if f.startswith("metrics.before-")]
    assert [json.loads(line)["step"] for line in open(os.path.join(logs, aside))] == [1, 2, 3, 4, 5, 6]


def test_nothing_left_to_train_runs_no_step(tmp_path):
    root = str(tmp_path / "run")
    make_trainer(root, total_steps=3).fit()
    again = make_trainer(root, total_steps=3)
    again.fit()
    assert again.seen == [] and again.global_steps == 3


def test_changed_batch_size_is_refused_with_the_key(tmp_path):
    root = str(tmp_path / "run")
    make_trainer(root, total_steps=3).fit()
    with pytest.raises(ValueError, match=r"data.train_batch_size=2, this run has 3"):
        make_trainer(root, batch_size=3).fit()


def test_tracker_naming_a_missing_folder_is_an_error(tmp_path):
    root = tmp_path / "run"
    root.mkdir()
    (root / "latest_checkpointed_iteration.txt").write_text("9")
    with pytest.raises(FileNotFoundError, match="names step 9 but .*global_step_9 does not exist"):
        make_trainer(str(root)).fit()


def test_incomplete_critic_is_named(tmp_path):
    root = str(tmp_path / "run")
    make_trainer(root, total_steps=2, save_freq=2).fit()
    os.remove(os.path.join(root, "global_step_2", "critic", "manifest.json"))
    with pytest.raises(FileNotFoundError, match=r"global_step_2/critic/manifest.json missing"):
        make_trainer(root).fit()
