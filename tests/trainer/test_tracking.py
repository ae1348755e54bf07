"""Tracking: console line format, jsonl round trip, tensorboard events, backend selection, wandb/mlflow wiring."""

from __future__ import annotations

import glob
import json
import os
import sys
import types

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from tests.helpers.fake_mlflow import install_fake_mlflow
from verl.trainer.tracking import Tracking, flatten_dict, format_console_line, format_value, sanitize_mlflow_key


@pytest.mark.parametrize(
    "value, text",
    [
        (1.0, "1.0"),
        (2.5, "2.5"),
        (3, "3"),
        (True, "1"),
        (0.0, "0.0"),
        (-0.5, "-0.5"),
        (0.123456, "0.1235"),  # 4 significant digits
        (1234.5678, "1234.6"),  # at least one decimal for floats
        (123456.7, "123456.7"),
        (1.5e-5, "1.500e-05"),  # below 1e-4: exponent form
        (2.5e7, "2.500e+07"),  # 1e6 and above: exponent form
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (np.float32(0.5), "0.5"),
        (np.int64(7), "7"),
        (torch.tensor(2.0), "2.0"),
    ],
)
def test_format_value(value, text):
    assert format_value(value) == text


def test_console_line_sorted_and_numeric_only():
    line = format_console_line({"b": 2.5, "a": 1.0, "n": 3, "note": "text"}, step=3)
    assert line == "step:3 - a:1.0 - b:2.5 - n:3"


def test_console_backend_prints_one_line_per_step_to_stdout(capsys, tmp_path):
    tracker = Tracking("proj", "exp", default_backend="console", log_dir=str(tmp_path),
                       config={"trainer": {"console_format": "full"}})  # the compact row: test_console_table.py
    tracker.log({"b": 2.5, "a": 1.0}, step=3)
    tracker.log({"actor/pg_loss": 0.25}, step=4)
    tracker.finish()
    captured = capsys.readouterr()
    assert captured.out == "step:3 - a:1.0 - b:2.5\nstep:4 - actor/pg_loss:0.25\n"
    assert captured.err == ""


def test_jsonl_round_trip(tmp_path):
    tracker = Tracking("proj", "exp", default_backend=["file"], log_dir=str(tmp_path))
    tracker.log({"critic/score/mean": 0.5, "response_length/mean": np.float32(12.0)}, step=1)
    tracker.log({"critic/score/mean": 0.75}, step=2)
    tracker.finish()
    assert tracker.metrics_path == os.path.join(str(tmp_path), "metrics.jsonl")
    with open(tracker.metrics_path) as fh:
        records = [json.loads(line) for line in fh]
    assert records == [
        {"step": 1, "critic/score/mean": 0.5, "response_length/mean": 12.0},
        {"step": 2, "critic/score/mean": 0.75},
    ]


def _steps(path) -> list[int]:
    return [json.loads(line)["step"] for line in open(path)]


def test_a_run_from_scratch_sets_the_earlier_run_aside_and_a_resumed_one_continues(tmp_path, capsys):
    earlier = Tracking("proj", "exp", default_backend=["file"], log_dir=str(tmp_path))
    for step in range(1, 6):
        earlier.log({"x": float(step)}, step=step)
    earlier.log_generations([("q", "a", 1.0)], step=5)
    earlier.finish()

    resumed = Tracking("proj", "exp", default_backend=["file"], log_dir=str(tmp_path))
    resumed.start_run(3)  # from global_step_3: the same file goes on (the report merges repeated steps)
    resumed.log({"x": 4.5}, step=4)
    resumed.finish()
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3, 4, 5, 4]
    assert not glob.glob(str(tmp_path / "*.before-*"))

    fresh = Tracking("proj", "exp", default_backend=["console", "file"], log_dir=str(tmp_path))
    fresh.start_run(0)
    fresh.log({"x": 9.0}, step=1)
    fresh.finish()
    assert _steps(tmp_path / "metrics.jsonl") == [1]  # this run's steps only
    (aside,) = glob.glob(str(tmp_path / "metrics.before-*.jsonl"))
    assert _steps(aside) == [1, 2, 3, 4, 5, 4]  # nothing lost
    assert glob.glob(str(tmp_path / "val_generations.before-*.jsonl"))
    assert not (tmp_path / "val_generations.jsonl").exists()
    assert "moved to metrics.before-" in capsys.readouterr().out


def test_file_and_jsonl_are_one_backend(tmp_path):
    tracker = Tracking("proj", "exp", default_backend=["jsonl", "file", "jsonl"], log_dir=str(tmp_path))
    tracker.log({"x": 1.0}, step=1)
    tracker.finish()
    with open(tmp_path / "metrics.jsonl") as fh:
        assert len(fh.readlines()) == 1


def test_log_to_selected_backend_only(tmp_path, capsys):
    tracker = Tracking("proj", "exp", default_backend=["console", "file"], log_dir=str(tmp_path))
    tracker.log({"x": 1.0}, step=1, backend="jsonl")
    tracker.finish()
    assert capsys.readouterr().out == ""
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1


def _read_scalars(event_dir: str, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(event_dir)
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def test_tensorboard_writes_event_file(tmp_path, monkeypatch):
    monkeypatch.delenv("TENSORBOARD_DIR", raising=False)
    tracker = Tracking("proj", "exp", default_backend="tensorboard", log_dir=str(tmp_path))
    tracker.log({"critic/score/mean": 0.5, "note": "skipped"}, step=1)
    tracker.log({"critic/score/mean": 0.25}, step=2)
    tracker.finish()
    event_dir = str(tmp_path / "tensorboard")
    assert glob.glob(os.path.join(event_dir, "events.out.tfevents.*"))
    assert _read_scalars(event_dir, "critic/score/mean") == [(1, 0.5), (2, 0.25)]


def test_tensorboard_dir_env_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORBOARD_DIR", str(tmp_path / "tb_env"))
    tracker = Tracking("proj", "exp", default_backend="tensorboard", log_dir=str(tmp_path / "logs"))
    tracker.log({"a": 1.0}, step=1)
    tracker.finish()
    assert glob.glob(str(tmp_path / "tb_env" / "events.out.tfevents.*"))
    assert not os.path.exists(tmp_path / "logs" / "tensorboard")


def test_unknown_backend_lists_known_ones():
    with pytest.raises(ValueError, match="known backends") as info:
        Tracking("proj", "exp", default_backend=["console", "neptune"])
    assert "neptune" in str(info.value)
    for name in ("console", "tensorboard", "wandb", "mlflow", "file"):
        assert name in str(info.value)


def test_finish_is_idempotent_and_log_after_finish_fails(tmp_path):
    tracker = Tracking("proj", "exp", default_backend=["console", "file"], log_dir=str(tmp_path))
    tracker.finish()
    tracker.finish()
    with pytest.raises(RuntimeError, match="after finish"):
        tracker.log({"a": 1.0}, step=1)


@pytest.mark.parametrize("backend, extra", [("wandb", r"pip install verl\[wandb\]"), ("mlflow", r"pip install verl\[mlflow\]")])
def test_missing_optional_backend_names_the_extra(monkeypatch, backend, extra):
    monkeypatch.setitem(sys.modules, backend, None)  # makes `import <backend>` raise ImportError
    with pytest.raises(ImportError, match=extra):
        Tracking("proj", "exp", default_backend=backend)


class _FakeWandbRun:
    def __init__(self) -> None:
        self.logged: list[tuple[dict, int]] = []
        self.finished = False

    def log(self, data, step):
        self.logged.append((data, step))

    def finish(self):
        self.finished = True


def _fake_wandb(monkeypatch) -> tuple[types.ModuleType, dict]:
    calls: dict = {}
    module = types.ModuleType("wandb")

    def init(**kwargs):
        calls["init"] = kwargs
        calls["run"] = _FakeWandbRun()
        return calls["run"]

    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module, calls


def test_wandb_offline_without_credentials(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    _, calls = _fake_wandb(monkeypatch)
    config = OmegaConf.create({"trainer": {"total_epochs": 2}, "data": {"max_prompt_length": "${trainer.total_epochs}"}})
    tracker = Tracking("proj", "exp", default_backend="wandb", config=config)
    tracker.log({"a": torch.tensor(1.5)}, step=7)
    tracker.finish()
    assert calls["init"]["mode"] == "offline"
    assert calls["init"]["project"] == "proj" and calls["init"]["name"] == "exp"
    assert calls["init"]["config"] == {"trainer": {"total_epochs": 2}, "data": {"max_prompt_length": 2}}  # resolved
    assert calls["run"].logged == [({"a": 1.5}, 7)]
    assert calls["run"].finished


def test_wandb_online_when_key_present(monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    _, calls = _fake_wandb(monkeypatch)
    Tracking("proj", "exp", default_backend="wandb").finish()
    assert "mode" not in calls["init"]


def test_mlflow_sanitises_names_and_logs_flat_params(monkeypatch, tmp_path):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    calls = install_fake_mlflow(monkeypatch)

    tracker = Tracking("proj", "exp", default_backend="mlflow", config={"actor": {"optim": {"lr": 1e-6}}},
                       log_dir=str(tmp_path))
    tracker.log({"val-core/gsm8k/acc/mean@4": 0.5, "note": "skipped"}, step=3)
    tracker.finish()
    assert calls["uri"] == "file:" + str(tmp_path / "mlruns")
    assert (calls["experiment"], calls["run_name"]) == ("proj", "exp")
    assert calls["params"] == {"actor.optim.lr": "1e-06"}
    assert calls["metrics"] == [(3, {"val-core/gsm8k/acc/mean_at_4": 0.5})]
    assert calls["ended"]


def test_sanitize_mlflow_key():
    assert sanitize_mlflow_key("a/b c:d-e.f_g") == "a/b c:d-e.f_g"
    assert sanitize_mlflow_key("maj@8/mean") == "maj_at_8/mean"
    assert sanitize_mlflow_key("x(y)") == "x_y_"


def test_flatten_dict():
    assert flatten_dict({"a": {"b": 1, "c": {"d": [1, 2]}}, "e": None}) == {"a.b": 1, "a.c.d": [1, 2], "e": None}


def test_mlflow_logging_adapter_sanitizes_keys_and_warns_once_per_key():
    from unittest.mock import patch

    from verl.utils.tracking import _MlflowLoggingAdapter

    adapter = _MlflowLoggingAdapter()
    data = {"ok/key": 1.0, "acc@8!": 2, "val-core///acc": 3.0, "note": "text"}
    with patch("mlflow.log_metrics") as log_metrics, patch.object(adapter, "logger") as logger:
        adapter.log(data, step=5)
        adapter.log(data, step=6)
    assert log_metrics.call_args.kwargs == {"metrics": {"ok/key": 1.0, "acc_at_8_": 2.0, "val-core/acc": 3.0},
                                            "step": 6}
    warned = [str(c) for c in logger.warning.call_args_list]
    assert len(warned) == 2  # two renamed keys, each warned about once
    assert any("acc@8!" in w and "acc_at_8_" in w for w in warned)
    assert any("val-core///acc" in w and "val-core/acc" in w for w in warned)
