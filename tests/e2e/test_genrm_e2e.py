"""A whole GRPO run whose reward comes from a generative reward model on its own engine: reward_model.rollout.name=hf
serves a scripted tiny judge (it always answers ``SCORE: 7``) in a Ray actor; the reward loop scores every sample
through examples/reward_loop/llm_judge.py, which reads the judge's address from reward_router_address."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, fit_run, make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides

pytestmark = pytest.mark.e2e  # ~1 min


def test_grpo_scores_come_from_the_judge_engine(tmp_path: Path) -> None:
    from tests.helpers.scripted_judge import build_scripted_judge_dir

    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data", train_size=8, test_size=4)
    judge_dir = build_scripted_judge_dir(tmp_path / "judge", "SCORE: 7")
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", n_workers=1) + [
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.mode=async",
        "reward_model.enable=true", "reward_model.use_reward_loop=true", "reward_model.num_workers=2",
        f"reward_model.model.path={judge_dir}", "reward_model.rollout.name=hf", "reward_model.rollout.dtype=float32",
        "reward_model.rollout.prompt_length=512", "reward_model.rollout.response_length=16",
        f"custom_reward_function.path={REPO / 'examples/reward_loop/llm_judge.py'}",
    ]
    seen = {}

    def body(trainer) -> None:
        assert trainer.rm_wg is None  # the judge engine replaces the reward-model worker
        trainer.fit()
        seen.update(trainer.genrm_stats)
        seen["stopped"] = trainer.genrm is None

    rows = fit_run(overrides, body)
    assert len(rows) == 2
    for row in rows:
        assert row["critic/score/mean"] == pytest.approx(0.7)
        assert row["critic/score/max"] == pytest.approx(0.7)
    # 4 prompts x n=2 per step, 2 steps: every sample was scored by a request to the judge
    assert seen["completed"] == 16 and seen["failed"] == 0 and seen["stopped"]


@pytest.mark.slow  # CI keeps a small e2e set; make test-all runs this
def test_grpo_scores_come_from_a_discriminative_reward_model_on_the_engine(tmp_path: Path) -> None:
    """No custom reward function: reward_model.model.path is a discriminative reward model, served behind /classify
    and asked about each sample as it finishes (upstream's disrm path). Its head scores every input 0.25."""
    import torch
    from transformers import AutoModelForTokenClassification

    from tests.workers.reward_model.rm_fixtures import make_tiny_rm_dir

    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data", train_size=8, test_size=4)
    rm_dir = make_tiny_rm_dir(tmp_path / "rm", "token")
    rm = AutoModelForTokenClassification.from_pretrained(rm_dir, num_labels=1)
    with torch.no_grad():
        rm.score.weight.zero_()
        rm.score.bias.fill_(0.25)
    rm.save_pretrained(rm_dir)
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", n_workers=1) + [
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.mode=async",
        "reward_model.enable=true", "reward_model.use_reward_loop=true", "reward_model.num_workers=2",
        f"reward_model.model.path={rm_dir}", "reward_model.rollout.name=hf", "reward_model.rollout.dtype=float32",
        "reward_model.rollout.prompt_length=512", "reward_model.rollout.response_length=64",
    ]
    seen = {}

    def body(trainer) -> None:
        assert trainer.rm_wg is None  # the engine replaces the reward-model worker
        trainer.fit()
        seen.update(trainer.genrm_stats)

    rows = fit_run(overrides, body)
    assert len(rows) == 2
    for row in rows:
        assert row["critic/score/mean"] == pytest.approx(0.25, abs=1e-5)
    # 16 samples over the two steps; an empty response is not sent (it scores 0, and the mean above shows none)
    assert seen["completed"] == 16 and seen["failed"] == 0 and seen["batches"] >= 1


@pytest.mark.slow  # CI keeps a small e2e set; make test-all runs this
def test_grpo_scores_come_from_two_judge_replicas_behind_the_router(tmp_path: Path) -> None:
    """reward_model.enable_resource_pool with n_gpus_per_node=2: two judge engines (one CPU each) behind the reward
    router; the reward function reaches them at reward_router_address and both answer."""
    from tests.helpers.scripted_judge import build_scripted_judge_dir

    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data", train_size=8, test_size=4)
    judge_dir = build_scripted_judge_dir(tmp_path / "judge", "SCORE: 7")
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", n_workers=1) + [
        "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.mode=async",
        "reward_model.enable=true", "reward_model.use_reward_loop=true", "reward_model.num_workers=4",
        "reward_model.enable_resource_pool=true", "reward_model.n_gpus_per_node=2", "reward_model.nnodes=1",
        f"reward_model.model.path={judge_dir}", "reward_model.rollout.name=hf", "reward_model.rollout.dtype=float32",
        "reward_model.rollout.prompt_length=512", "reward_model.rollout.response_length=16",
        f"custom_reward_function.path={REPO / 'examples/reward_loop/llm_judge.py'}",
    ]
    seen = {}

    def body(trainer) -> None:
        seen["router_address"] = trainer.genrm.get_router_address()
        seen["replica_addresses"] = list(trainer.genrm.replica_addresses)
        trainer.fit()
        seen["stats"] = trainer.genrm_stats

    rows = fit_run(overrides, body)
    assert len(rows) == 2 and all(row["critic/score/mean"] == pytest.approx(0.7) for row in rows)
    assert len(seen["replica_addresses"]) == 2 and seen["router_address"] not in seen["replica_addresses"]
    stats = seen["stats"]
    per_replica = [replica["completed"] for replica in stats["replicas"]]  # each engine's own counters
    assert stats["completed"] == 16 and stats["failed"] == 0 and stats["router"]["completed"] == 16
    assert all(n > 0 for n in per_replica) and sum(per_replica) == 16
