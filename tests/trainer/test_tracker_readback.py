"""The real trackers (tensorboard, wandb offline, mlflow on a local file store, swanlab offline), read back through
their own readers and compared with the metrics.jsonl the same Tracking wrote: steps, values, the config as
hyperparameters, and the report's images as artifacts."""

from __future__ import annotations

import glob
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.helpers.tracker_readers import read_wandb_offline_run
from verl.trainer.tracking import Tracking
from verl.trainer.tracking_backends import flatten_dict, mlflow_tracking_uri, sanitize_mlflow_key

pytest.importorskip("wandb")
pytest.importorskip("mlflow")
pytest.importorskip("swanlab")

REPO = Path(__file__).resolve().parents[2]
TRACKER_ENV = ("WANDB_MODE", "WANDB_API_KEY", "WANDB_DIR", "MLFLOW_TRACKING_URI", "MLFLOW_ALLOW_FILE_STORE",
               "SWANLAB_MODE", "SWANLAB_API_KEY", "SWANLAB_LOG_DIR", "TENSORBOARD_DIR")
CONFIG = {"trainer": {"project_name": "proj", "total_epochs": 2}, "actor": {"optim": {"lr": 1e-6}},
          "data": {"train_files": ["a.parquet", "b.parquet"]}}
# step -> metrics, as a trainer would log them: a key with "@" (mlflow renames it), a string (jsonl only)
STEPS = {
    1: {"critic/score/mean": 0.25, "actor/pg_loss": -0.5, "val-core/arith/acc/mean@2": 0.5, "note": "warmup"},
    2: {"critic/score/mean": 0.5, "actor/pg_loss": -0.25},
    3: {"critic/score/mean": 0.75, "actor/pg_loss": 0.125, "val-core/arith/acc/mean@2": 1.0},
}
BACKENDS = ["tensorboard", "wandb", "mlflow", "swanlab", "jsonl"]


def _write_png(path: Path, color: tuple[int, int, int]) -> str:
    from PIL import Image

    Image.new("RGB", (12, 8), color).save(path)
    return str(path)


def _numeric_rows(metrics_jsonl: str) -> dict[int, dict[str, float]]:
    rows = [json.loads(line) for line in Path(metrics_jsonl).read_text().splitlines()]
    return {r["step"]: {k: v for k, v in r.items() if k != "step" and isinstance(v, (int, float))} for r in rows}


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """One Tracking to every real backend (started once: each tracker's start costs about a second)."""
    root = tmp_path_factory.mktemp("trackers")
    with pytest.MonkeyPatch.context() as mp:
        for name in TRACKER_ENV:
            mp.delenv(name, raising=False)
        mp.chdir(root)  # anything a tracker writes to the working directory stays in the test's folder
        tracker = Tracking("proj", "exp", default_backend=BACKENDS, config=CONFIG, log_dir=str(root / "report"))
        for step, metrics in STEPS.items():
            tracker.log(metrics, step=step)
        images = [_write_png(root / "reward.png", (255, 0, 0)), _write_png(root / "kl.png", (0, 0, 255))]
        tracker.log_artifacts(images)
        mlflow_backend = tracker.logger["mlflow"]
        wandb_dir = tracker.logger["wandb"].run_dir
        tracker.finish()
        yield {"root": root, "report": root / "report", "rows": _numeric_rows(tracker.metrics_path),
               "mlflow_uri": mlflow_backend.tracking_uri, "mlflow_run": mlflow_backend.run_id,
               "wandb_dir": wandb_dir, "images": images}


def test_jsonl_holds_every_logged_number(logged):
    assert logged["rows"] == {s: {k: v for k, v in m.items() if k != "note"} for s, m in STEPS.items()}


def test_mlflow_client_reads_back_metrics_params_and_report_images(logged):
    from mlflow.tracking import MlflowClient

    assert logged["mlflow_uri"] == "file:" + str(logged["report"] / "mlruns")  # the default: in the report folder
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient(tracking_uri=logged["mlflow_uri"])
    run_id = logged["mlflow_run"]
    expected: dict[str, list[tuple[int, float]]] = {}
    for step, row in logged["rows"].items():
        for key, value in row.items():
            expected.setdefault(sanitize_mlflow_key(key), []).append((step, float(value)))
    assert set(client.get_run(run_id).data.metrics) == set(expected)
    for key, points in expected.items():
        history = sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
        assert history == points, key
    assert "val-core/arith/acc/mean_at_2" in expected  # "@" renamed, the value kept
    run = client.get_run(run_id)
    assert run.data.params == {sanitize_mlflow_key(k): str(v) for k, v in flatten_dict(CONFIG).items()}
    assert run.data.params["actor.optim.lr"] == "1e-06"
    assert run.info.run_name == "exp" and run.info.status == "FINISHED"
    assert sorted(a.path for a in client.list_artifacts(run_id, "report")) == ["report/kl.png", "report/reward.png"]


def test_tensorboard_event_reader_reads_back_scalars_hparams_and_images(logged):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logged["report"] / "tensorboard"), size_guidance={"scalars": 0, "images": 0,
                                                                                      "tensors": 0})
    events.Reload()
    expected: dict[str, list[tuple[int, float]]] = {}
    for step, row in logged["rows"].items():
        for key, value in row.items():
            expected.setdefault(key, []).append((step, float(value)))
    assert set(events.Tags()["scalars"]) == set(expected)
    for key, points in expected.items():
        got = [(e.step, e.value) for e in events.Scalars(key)]
        assert [s for s, _ in got] == [s for s, _ in points], key
        assert all(math.isclose(g, w, rel_tol=1e-6) for (_, g), (_, w) in zip(got, points)), key  # float32 on disk
    (hparams,) = events.Tensors("hparams/text_summary")
    table = hparams.tensor_proto.string_val[0].decode()
    for key, value in flatten_dict(CONFIG).items():
        assert f"| {key} | {value} |" in table
    for name in ("report/reward", "report/kl"):
        (image,) = events.Images(name)
        assert (image.step, image.width, image.height) == (3, 12, 8)  # at the last logged step


def test_wandb_offline_run_folder_holds_history_config_summary_and_images(logged):
    run_dir = logged["wandb_dir"]
    assert run_dir.startswith(str(logged["report"] / "wandb" / "offline-run-"))
    run = read_wandb_offline_run(run_dir)
    for step, row in logged["rows"].items():
        numbers = {k: v for k, v in run["history"][step].items()
                   if isinstance(v, (int, float)) and not k.startswith("report/")}
        assert numbers == row, step
    assert run["history"][1]["note"] == "warmup"  # wandb keeps strings in its history too
    assert run["config"]["actor"] == {"optim": {"lr": 1e-6}}
    assert run["config"]["data"] == {"train_files": ["a.parquet", "b.parquet"]}
    last = logged["rows"][3]
    assert {k: run["summary"][k] for k in last} == last
    assert run["summary"]["_step"] == 3
    for name in ("reward", "kl"):
        path = run["history"][3][f"report/{name}/path"]
        assert path in run["files"] and path.startswith(f"media/images/report/{name}_3_")


def test_swanlab_offline_run_holds_scalars_config_and_images(logged):
    import yaml
    from swanlab.proto.swanlab.record.v1 import record_pb2
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    (run_dir,) = glob.glob(str(logged["report"] / "swanlog" / "run-*"))
    (log_path,) = glob.glob(os.path.join(run_dir, "run-*.swanlab"))
    reader = DataStoreReader()
    reader.open(log_path)
    scalars: dict[int, dict[str, float]] = {}
    media: dict[str, int] = {}
    for raw in reader:
        record = record_pb2.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "scalar":
            scalars.setdefault(record.scalar.step, {})[record.scalar.key] = record.scalar.value.number
        elif kind == "media":
            media[record.media.key] = record.media.step
    reader.close()
    assert scalars == {s: {k: float(v) for k, v in row.items()} for s, row in logged["rows"].items()}
    assert media == {"report/reward": 3, "report/kl": 3}
    assert len(glob.glob(os.path.join(run_dir, "media", "image", "*.png"))) == 2
    config = yaml.safe_load(Path(run_dir, "files", "config.yaml").read_text())
    assert config["actor"]["value"] == {"optim": {"lr": 1e-6}}
    assert config["trainer"]["value"]["total_epochs"] == 2


def test_log_artifacts_checks_files_and_refuses_after_finish(tmp_path):
    tracker = Tracking("proj", "exp", default_backend=["tensorboard"], log_dir=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="nope.png"):
        tracker.log_artifacts([str(tmp_path / "nope.png")])
    tracker.log_artifacts([_write_png(tmp_path / "a.png", (0, 255, 0))])  # nothing logged yet: step 0
    tracker.finish()
    with pytest.raises(RuntimeError, match="before finish"):
        tracker.log_artifacts([str(tmp_path / "a.png")])


def test_mlflow_sql_store_without_sqlalchemy_says_what_to_do(monkeypatch, tmp_path):
    import importlib.util

    if importlib.util.find_spec("sqlalchemy") is not None:
        pytest.skip("SQLAlchemy is installed: mlflow opens the SQL store itself")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    with pytest.raises(ImportError, match="MLFLOW_TRACKING_URI=sqlite.*pip install sqlalchemy alembic"):
        mlflow_tracking_uri(str(tmp_path))
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    assert mlflow_tracking_uri(str(tmp_path)) == f"file:{tmp_path}/mlruns"
    assert os.environ["MLFLOW_ALLOW_FILE_STORE"] == "true"  # mlflow 3 refuses the file store without it


_NO_NETWORK_SCRIPT = """
import sys, time
sys.path.insert(0, {repo!r})
from verl.trainer.tracking import Tracking
start = time.time()
tracker = Tracking("proj", "exp", default_backend=["wandb", "mlflow", "swanlab", "tensorboard", "jsonl"],
                   config={{"a": {{"b": 1}}}}, log_dir={report!r})
for step in (1, 2):
    tracker.log({{"x": step / 2}}, step=step)
tracker.finish()
print("SECONDS", round(time.time() - start, 2))
"""


@pytest.mark.slow  # a fresh interpreter importing all four trackers: 10-20 s on 2 busy cores
def test_trackers_run_with_no_network_at_all(tmp_path):
    """In a network namespace with no interface up, every tracker starts, logs and finishes: none of them
    reaches for the network, and none hangs in finish()."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare -rn (a user namespace without network) is not available here")
    env = {k: v for k, v in os.environ.items() if k not in TRACKER_ENV}
    script = _NO_NETWORK_SCRIPT.format(repo=str(REPO), report=str(tmp_path / "report"))
    # A tracker that hung in finish() would run into the generous subprocess deadline.
    proc = subprocess.run([unshare, "-rn", sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SECONDS" in proc.stdout
    assert glob.glob(str(tmp_path / "report" / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert glob.glob(str(tmp_path / "report" / "swanlog" / "run-*" / "run-*.swanlab"))
    assert (tmp_path / "report" / "mlruns").is_dir()
    assert _numeric_rows(str(tmp_path / "report" / "metrics.jsonl")) == {1: {"x": 0.5}, 2: {"x": 1.0}}


def test_swanlab_is_a_built_backend_in_the_ppo_and_sft_configs():
    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.sft.config import validate_sft_config

    typed = validate_config(load_config(["trainer.logger=[console,swanlab]"]), check_files=False)
    assert list(typed.trainer.logger) == ["console", "swanlab"]
    sft = validate_sft_config({"trainer": {"logger": ["console", "swanlab"]}}, world_size=1, check_files=False)
    assert list(sft.trainer.logger) == ["console", "swanlab"]


def test_swanlab_missing_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "swanlab", None)  # makes `import swanlab` raise ImportError
    with pytest.raises(ImportError, match=r"'swanlab'.*pip install verl\[tracking\]"):
        Tracking("proj", "exp", default_backend="swanlab", log_dir=str(tmp_path))


def test_wandb_dir_env_moves_the_run_folder(monkeypatch, tmp_path):
    for name in TRACKER_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    tracker = Tracking("proj", "exp", default_backend="wandb", log_dir=str(tmp_path / "report"))
    run_dir = tracker.logger["wandb"].run_dir
    tracker.log({"x": 1.0}, step=1)
    tracker.finish()
    assert run_dir.startswith(str(tmp_path / "elsewhere" / "wandb" / "offline-run-"))
    # finish() also stops wandb's service process: a driver that goes on after training does not keep it
    assert not [p for p in psutil.Process().children(recursive=True) if "wandb" in p.name()]
    assert read_wandb_offline_run(run_dir)["history"][1] == {"x": 1.0}
    assert not (tmp_path / "report" / "wandb").exists()
