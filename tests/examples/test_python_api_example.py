"""examples/python_api/grpo_lambda_reward.py, run in-process on a tiny random model: the result object's fields
are real (one history row per step, the logged metrics, the checkpoint folder, the report), and the lambda reward
is the one that scored (its reward reaches the logged score)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, make_tiny_model_dir

pytestmark = pytest.mark.e2e

TINY = ["data.train_batch_size=4", "data.max_response_length=8", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4", "actor_rollout_ref.actor.optim.lr=1e-2",
        "trainer.save_freq=2", "ray_kwargs.ray_init.num_cpus=2"]


def _load_example():
    spec = importlib.util.spec_from_file_location("grpo_lambda_reward",
                                                  REPO / "examples/python_api/grpo_lambda_reward.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_runs_on_a_tiny_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    model_dir = make_tiny_model_dir(tmp_path / "model")
    run_dir = tmp_path / "run"
    for key, value in {"EXAMPLE_MODEL": str(model_dir), "EXAMPLE_STEPS": "2", "EXAMPLE_TRAIN_SIZE": "8",
                       "EXAMPLE_TEST_SIZE": "4", "EXAMPLE_OUT": str(run_dir), "EXAMPLE_ROLLOUT": "hf"}.items():
        monkeypatch.setenv(key, value)
    example = _load_example()
    try:
        result = example.main(TINY)
    finally:
        ray.shutdown()

    assert [row["training/global_step"] for row in result.history] == [1, 2]
    for row in result.history:
        assert "actor/pg_loss" in row and "critic/score/mean" in row and "timing_s/step" in row
    # validation before training (step 0) and at the last step (test_freq = steps)
    assert [step for step, _ in result.validations] == [0, 2]
    assert result.final_validation == result.validations[-1][1]
    assert any(key.startswith("val-core/arithmetic/") for key in result.final_validation)
    assert result.checkpoint_path == str(run_dir / "global_step_2") or Path(result.checkpoint_path).name == "global_step_2"
    assert os.path.isdir(result.checkpoint_path)
    assert Path(result.report_dir, "metrics.jsonl").is_file()
    logged = [json.loads(line) for line in Path(result.metrics_file).read_text().splitlines()]
    logged_steps = [r for r in logged if "actor/pg_loss" in r]
    assert [r["critic/score/mean"] for r in logged_steps] == [h["critic/score/mean"] for h in result.history]
    # the rows were written to the run's folder and read from there
    assert (run_dir / "data" / "train.parquet").is_file() and (run_dir / "data" / "val.parquet").is_file()
    assert result.summary and not result.finished
