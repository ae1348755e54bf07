"""verl.train end to end on a tiny model: a raising callback stops the run with its error, and a second call in the
same process (Ray shut down by the first) trains with a batched reward on a datasets.Dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

import verl
from tests.helpers.e2e import make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # ~26 s; tests/examples/test_python_api_example.py runs train() in the default suite


def test_callback_error_stops_the_run_then_a_second_call_trains(tmp_path: Path) -> None:
    import ray
    from datasets import Dataset

    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data", train_size=8, test_size=4)
    seen: list[int] = []

    def stop_at_first(step, metrics):
        seen.append(step)
        raise RuntimeError(f"callback stopped the run at step {step}")

    base = tiny_run_overrides(model_dir, data_dir, tmp_path / "run1", n_workers=1) + ["ray_kwargs.ray_init.num_cpus=2"]
    with pytest.raises(RuntimeError, match="callback stopped the run at step 1"):
        verl.train(base, reward_fn=lambda data_source, solution_str, ground_truth, extra_info: 1.0,
                   callbacks={"on_step_end": stop_at_first})
    assert seen == [1] and not ray.is_initialized()

    rows = Dataset.from_parquet(str(data_dir / "train.parquet"))
    cfg = verl.config(tiny_run_overrides(model_dir, data_dir, tmp_path / "run2", n_workers=1)
                      + ["ray_kwargs.ray_init.num_cpus=2", "trainer.total_training_steps=1"])
    result = verl.train(cfg, train_data=rows,
                        reward_fn=lambda data_sources, solution_strs, ground_truths, extra_infos:
                        [0.5] * len(solution_strs))
    assert not ray.is_initialized()
    assert len(result.history) == 1
    # every response scored 0.5 by the batched lambda (the reward manager was switched to batch for it)
    assert result.history[0]["critic/score/mean"] == pytest.approx(0.5)
    assert result.checkpoint_path is None and result.final_validation == {}
    assert (tmp_path / "run2" / "data" / "train.parquet").is_file()
