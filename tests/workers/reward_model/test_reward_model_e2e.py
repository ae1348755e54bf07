"""Whole GRPO runs (Ray, tiny random policy and reward model) whose reward comes from the reward-model worker.

The batch that reaches the actor update is captured: its scores must be the reward model's ``rm_scores`` (not the
rule reward's), and its advantages GRPO's, computed here by hand from those scores. One run keeps the reward
model in the actor's processes (the default), the other gives it a pool of its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.e2e import make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides
from tests.workers.reward_model.rm_fixtures import make_tiny_rm_dir
from verl.protocol import DataProto

pytestmark = pytest.mark.e2e


def _run(tmp_path: Path, extra: list[str]) -> tuple[DataProto, dict]:
    import ray

    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import build_trainer

    model_dir = make_tiny_model_dir(tmp_path / "model")
    rm_dir = make_tiny_rm_dir(tmp_path / "rm", "token")
    data_dir = make_arithmetic_data(tmp_path / "data", train_size=8, test_size=4)
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", n_workers=1) + [
        "trainer.total_training_steps=1", "trainer.save_freq=-1", "reward_model.enable=true",
        f"reward_model.model.path={rm_dir}", "reward_model.micro_batch_size_per_gpu=3",
    ] + extra
    trainer, tracker, _ = build_trainer(validate_config(load_config(overrides)))
    captured: list[DataProto] = []
    try:
        trainer.init_workers()
        update_actor = trainer.actor_rollout_wg.update_actor

        def capture(batch: DataProto, *args, **kwargs):
            captured.append(batch)
            return update_actor(batch, *args, **kwargs)

        trainer.actor_rollout_wg.update_actor = capture
        placement = {"rm": list(trainer.rm_wg.worker_names), "actor": list(trainer.actor_rollout_wg.worker_names)}
        trainer.fit()
    finally:
        tracker.finish()
        ray.shutdown()
    assert len(captured) == 1
    return captured[0], placement


def _check_reward_came_from_the_model(batch: DataProto) -> None:
    rm_scores = batch.batch["rm_scores"]
    response_length = rm_scores.size(1)
    valid = batch.batch["attention_mask"][:, -response_length:].sum(-1)
    # one score per row, on its last real response token, and it is what the advantages were computed from
    for i, n in enumerate(valid.tolist()):
        assert n > 0
        assert torch.count_nonzero(rm_scores[i]) == 1 and rm_scores[i, n - 1] != 0
    assert torch.equal(batch.batch["token_level_scores"], rm_scores)
    assert torch.equal(batch.batch["token_level_rewards"], rm_scores)  # no KL in the reward here
    # GRPO by hand: each response's score against its group's (rollout.n=2, interleaved) mean and std
    scores = rm_scores.sum(-1)
    uids = batch.non_tensor_batch["uid"]
    mask = batch.batch["response_mask"].float()
    for i in range(len(batch)):
        group = torch.stack([scores[j] for j in range(len(batch)) if uids[j] == uids[i]])
        want = (scores[i] - group.mean()) / (group.std() + 1e-6)
        assert torch.allclose(batch.batch["advantages"][i], want * mask[i], atol=1e-5)
    assert batch.batch["advantages"].abs().sum() > 0


@pytest.mark.timeout(400)
def test_grpo_reward_comes_from_the_colocated_reward_model(tmp_path: Path) -> None:
    batch, placement = _run(tmp_path, [])
    _check_reward_came_from_the_model(batch)
    assert placement["rm"] == placement["actor"]  # the same Ray actors: one process per rank holds both roles


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_grpo_with_the_reward_model_in_its_own_resource_pool(tmp_path: Path) -> None:
    batch, placement = _run(tmp_path, ["reward_model.enable_resource_pool=true", "reward_model.n_gpus_per_node=1",
                                       "reward_model.nnodes=1", "reward_model.use_dynamic_bsz=true",
                                       "reward_model.forward_max_token_len_per_gpu=1024"])
    _check_reward_came_from_the_model(batch)
    assert len(placement["rm"]) == 1
    assert set(placement["rm"]).isdisjoint(placement["actor"])  # its own process, in reward_pool
