"""train_data / val_data forms, and the callback hooks the trainer calls."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from verl.trainer.api.callbacks import Callback, CallbackList, Recorder
from verl.trainer.api.datasets import materialize
from verl.trainer.config import ConfigError

ROWS = [{"data_source": "arithmetic", "prompt": [{"role": "user", "content": f"{i} + 1?"}],
         "reward_model": {"style": "rule", "ground_truth": str(i + 1)}, "extra_info": {"index": i}} for i in range(3)]


def test_paths_pass_through(tmp_path: Path) -> None:
    assert materialize(tmp_path / "a.parquet", "train", str(tmp_path)) == [str(tmp_path / "a.parquet")]
    assert materialize(["x.parquet", "y.parquet"], "val", str(tmp_path)) == ["x.parquet", "y.parquet"]


def test_rows_are_written_to_the_run_folder(tmp_path: Path) -> None:
    (path,) = materialize(ROWS, "train", str(tmp_path / "run"))
    assert path == str(tmp_path / "run" / "data" / "train.parquet")
    assert pq.read_table(path).to_pylist() == ROWS


def test_a_datasets_dataset_is_written_to_the_run_folder(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    (path,) = materialize(datasets.Dataset.from_list(ROWS), "val", str(tmp_path))
    assert path == str(tmp_path / "data" / "val.parquet")
    assert pq.read_table(path).to_pylist() == ROWS


@pytest.mark.parametrize("bad, message", [([], "has no rows"), ([1, 2], "are not dicts"), (42, "got int"),
                                          ([{"a": 1}, {"a": "x"}], "do not form one table")])
def test_bad_data_is_refused_naming_the_argument(tmp_path: Path, bad, message: str) -> None:
    with pytest.raises(ConfigError, match=f"train_data.*{message}|train_data=.*{message}"):
        materialize(bad, "train", str(tmp_path))


def test_callback_forms_dispatch_in_order() -> None:
    calls = []

    class Mine(Callback):
        def on_step_end(self, step, metrics):
            calls.append(("class", step, metrics["x"]))

    hooks = CallbackList([Mine(), {"on_step_end": lambda step, m: calls.append(("dict", step, m["x"])),
                                   "on_checkpoint": lambda step, path: calls.append(("ckpt", step, path))}])
    hooks.call("on_step_end", 3, {"x": 1.0})
    hooks.call("on_checkpoint", 4, "/run/global_step_4")
    hooks.call("on_validation", 4, {})  # nobody listens: nothing happens
    assert calls == [("class", 3, 1.0), ("dict", 3, 1.0), ("ckpt", 4, "/run/global_step_4")]


def test_bad_callbacks_are_refused() -> None:
    with pytest.raises(TypeError, match="unknown hook name"):
        CallbackList({"on_step": print})
    with pytest.raises(TypeError, match="has none of the hooks"):
        CallbackList([object()])


def _bare_trainer(hooks):
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = object.__new__(RayPPOTrainer)  # the hooks need no workers
    trainer.callbacks, trainer.global_steps = hooks, 7
    return trainer


def test_trainer_calls_the_hooks_with_its_step(monkeypatch: pytest.MonkeyPatch) -> None:
    import verl.trainer.ppo.checkpointing as checkpointing

    recorder = Recorder()
    trainer = _bare_trainer(CallbackList([recorder]))
    monkeypatch.setattr(checkpointing, "save_checkpoint", lambda t: f"/run/global_step_{t.global_steps}")
    trainer._save_checkpoint()
    trainer._notify("on_step_end", {"actor/pg_loss": 0.5})
    assert recorder.checkpoints == [(7, "/run/global_step_7")]
    assert recorder.history == [{"actor/pg_loss": 0.5}]


def test_a_raising_callback_stops_with_its_error() -> None:
    def boom(step, metrics):
        raise RuntimeError(f"stop at {step}")

    trainer = _bare_trainer(CallbackList({"on_step_end": boom}))
    with pytest.raises(RuntimeError, match="stop at 7"):
        trainer._notify("on_step_end", {})
