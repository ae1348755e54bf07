"""A whole tiny GRPO run through `python -m verl.trainer.main_ppo` with trainer.logger=[console,tensorboard,wandb,
mlflow]: each tracker, read back through its own reader, holds the run's metrics.jsonl (every step, every number),
the run's config as hyperparameters, and the run report's plots as images."""

from __future__ import annotations

import glob
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.e2e import make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides
from tests.helpers.tracker_readers import read_wandb_offline_run
from verl.trainer.tracking_backends import sanitize_mlflow_key

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TRACKER_ENV = ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE",
               "SWANLAB_MODE", "SWANLAB_API_KEY", "SWANLAB_LOG_DIR", "TENSORBOARD_DIR")


def _numeric_rows(report: Path) -> dict[int, dict[str, float]]:
    rows: dict[int, dict[str, float]] = {}
    for line in (report / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row["step"], {}).update(
            {k: v for k, v in row.items() if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)})
    return rows


def test_tiny_run_trackers_match_metrics_jsonl(tmp_path: Path) -> None:
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")
    report = tmp_path / "report"
    overrides = [o for o in tiny_run_overrides(model_dir, data_dir, tmp_path / "run", n_workers=1)
                 if not o.startswith("trainer.logger=")]
    overrides += ["trainer.logger=[console,tensorboard,wandb,mlflow]", f"trainer.report_dir={report}",
                  "trainer.project_name=trk", "trainer.experiment_name=tiny", "trainer.test_freq=1",
                  f"hydra.run.dir={tmp_path / 'hydra'}"]
    env = {k: v for k, v in os.environ.items() if k not in TRACKER_ENV}
    proc = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *overrides], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]

    rows = _numeric_rows(report)
    summary = json.loads((report / "summary.json").read_text())
    plots = sorted(f for f in summary["files"] if f.endswith(".png"))
    assert len(rows) >= 2 and plots, (rows.keys(), summary["files"])
    last_step = max(rows)

    # mlflow: the default local file store in the report folder, through its client
    from mlflow.tracking import MlflowClient

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=f"file:{report / 'mlruns'}")
    (run,) = client.search_runs([client.get_experiment_by_name("trk").experiment_id])
    run_id = run.info.run_id
    assert run.info.run_name == "tiny" and run.info.status == "FINISHED"
    keys = {k for row in rows.values() for k in row}
    assert set(run.data.metrics) == {sanitize_mlflow_key(k) for k in keys}
    for key in keys:
        want = [(s, float(row[key])) for s, row in sorted(rows.items()) if key in row]
        got = sorted((m.step, m.value) for m in client.get_metric_history(run_id, sanitize_mlflow_key(key)))
        assert got == want, key
    assert run.data.params["trainer.experiment_name"] == "tiny"
    assert run.data.params["actor_rollout_ref.rollout.n"] == "2"
    assert run.data.params["data.train_batch_size"] == "4"
    assert sorted(a.path for a in client.list_artifacts(run_id, "report")) == [f"report/{p}" for p in plots]

    # tensorboard: through its event reader
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(report / "tensorboard"), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    events.Reload()
    assert set(events.Tags()["scalars"]) == keys
    for key in keys:
        want = [(s, float(row[key])) for s, row in sorted(rows.items()) if key in row]
        got = [(e.step, e.value) for e in events.Scalars(key)]
        assert [s for s, _ in got] == [s for s, _ in want], key
        assert all(math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-30) for (_, g), (_, w) in zip(got, want)), key
    table = events.Tensors("hparams/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "| trainer.experiment_name | tiny |" in table and "| actor_rollout_ref.rollout.n | 2 |" in table
    assert sorted(events.Tags()["images"]) == sorted(f"report/{p[:-4]}" for p in plots)
    assert all(events.Images(f"report/{p[:-4]}")[0].step == last_step for p in plots)

    # wandb offline: the run folder under the report folder, through its transaction log
    (run_dir,) = glob.glob(str(report / "wandb" / "offline-run-*"))
    logged = read_wandb_offline_run(run_dir)
    for step, row in rows.items():
        history = {k: v for k, v in logged["history"][step].items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and not k.startswith("report/")}
        assert history.keys() == row.keys(), step
        assert all(math.isclose(history[k], v, rel_tol=1e-12) for k, v in row.items()), step
    assert logged["config"]["trainer"]["experiment_name"] == "tiny"
    assert logged["config"]["data"]["train_batch_size"] == 4
    assert logged["summary"]["_step"] == last_step
    for plot in plots:
        path = logged["history"][last_step][f"report/{plot[:-4]}/path"]
        assert path in logged["files"]
