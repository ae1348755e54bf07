"""The file- and service-backed trackers behind :class:`verl.trainer.tracking.Tracking`.

Each backend takes one step's metrics (``log``), the flattened config as hyperparameters (at start), the run
report's PNGs (``log_artifacts``, called before ``finish``) and closes in ``finish``. The optional packages are
imported only when their backend is chosen. Without credentials every backend stays on this machine:

- ``tensorboard``: event files; the config as a ``hparams`` text table, the report PNGs as images.
- ``wandb``: ``WANDB_MODE=offline`` unless ``WANDB_MODE`` or ``WANDB_API_KEY`` is set; the run folder goes under
  ``$WANDB_DIR``, else the report folder.
- ``mlflow``: ``$MLFLOW_TRACKING_URI``, else a ``file:`` store in ``<report dir>/mlruns`` (mlflow 3 refuses the
  file store unless ``MLFLOW_ALLOW_FILE_STORE=true``, which is set for that default).
- ``swanlab``: ``SWANLAB_MODE``, else ``online`` with ``SWANLAB_API_KEY`` and ``offline`` without; the run folder
  goes under ``$SWANLAB_LOG_DIR``, else ``<report dir>/swanlog``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import numbers
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["as_scalar", "flatten_dict", "sanitize_mlflow_key", "numeric_metrics", "TensorboardBackend",
           "WandbBackend", "MlflowBackend", "SwanlabBackend"]

Samples = list[tuple[str, str, float]]


def as_scalar(value: Any) -> Any:
    """numpy / torch scalars -> Python numbers; anything else unchanged."""
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        return value.item()
    return value


def flatten_dict(nested: Mapping[str, Any], sep: str = ".", prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists are kept as values."""
    flat: dict[str, Any] = {}
    for key, value in nested.items():
        name = f"{prefix}{sep}{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten_dict(value, sep, name))
        else:
            flat[name] = value
    return flat


def numeric_metrics(data: Mapping[str, Any]) -> dict[str, float | int]:
    """The numeric values of one step; strings and lists go to the jsonl file only."""
    out: dict[str, float | int] = {}
    for key, value in data.items():
        value = as_scalar(value)
        if isinstance(value, numbers.Number):
            out[key] = value  # type: ignore[assignment]
    return out


def _image_name(path: str) -> str:
    # report/reward for reward.png: one panel group per run report in every UI
    return "report/" + os.path.splitext(os.path.basename(path))[0]


def _missing(backend: str, extra: str) -> ImportError:
    return ImportError(f"trainer.logger includes '{backend}' but {backend} is not installed; run "
                       f"`pip install verl[{extra}]` (or `pip install {backend}`), or drop '{backend}' from "
                       "trainer.logger")


# ---------------------------------------------------------------------------------------------------------------
# tensorboard
# ---------------------------------------------------------------------------------------------------------------


class TensorboardBackend:
    def __init__(self, log_dir: str, config: dict[str, Any] | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        os.makedirs(log_dir, exist_ok=True)
        self.log_dir = log_dir
        self._writer = SummaryWriter(log_dir=log_dir)
        if config:
            # add_hparams would open a second run folder per call; one markdown table keeps the config with
            # the scalars it produced and reads back with the event reader as the text tag "hparams"
            rows = "\n".join(f"| {k} | {v} |" for k, v in flatten_dict(config).items())
            self._writer.add_text("hparams", "| key | value |\n|---|---|\n" + rows, 0)
            self._writer.flush()

    def log(self, data: dict[str, Any], step: int) -> None:
        for key, value in numeric_metrics(data).items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def log_generations(self, samples: Samples, step: int) -> None:
        text = "\n\n".join(f"**input**: {i}\n\n**output**: {o}\n\n**score**: {s}" for i, o, s in samples)
        self._writer.add_text("val/generations", text, step)
        self._writer.flush()

    def log_artifacts(self, paths: Sequence[str], step: int) -> None:
        import numpy as np
        from PIL import Image  # matplotlib, which draws the report, brings pillow

        for path in paths:
            with Image.open(path) as img:
                pixels = np.asarray(img.convert("RGB"))
            self._writer.add_image(_image_name(path), pixels, step, dataformats="HWC")
        self._writer.flush()

    def finish(self) -> None:
        self._writer.close()


# ---------------------------------------------------------------------------------------------------------------
# wandb
# ---------------------------------------------------------------------------------------------------------------


class WandbBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict[str, Any] | None,
                 log_dir: str | None = None) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise _missing("wandb", "wandb") from exc
        settings: dict[str, Any] = {}
        if not os.environ.get("WANDB_MODE") and not os.environ.get("WANDB_API_KEY"):
            # Without credentials an online init would prompt for a login or fail; offline runs can be
            # uploaded later with `wandb sync <run folder>`.
            settings["mode"] = "offline"
            print("wandb: WANDB_MODE and WANDB_API_KEY are unset -> offline mode "
                  "(set WANDB_MODE=online to sync live)", file=sys.stderr)
        run_root = os.environ.get("WANDB_DIR") or log_dir
        if run_root:
            os.makedirs(run_root, exist_ok=True)
            settings["dir"] = run_root
        self._wandb = wandb
        self._run = wandb.init(project=project_name, name=experiment_name, config=config, **settings)

    @property
    def run_dir(self) -> str:
        """The run folder (``.../wandb/offline-run-<time>-<id>``): the .wandb log, files/, logs/."""
        return os.path.dirname(self._run.dir)

    def log(self, data: dict[str, Any], step: int) -> None:
        self._run.log({k: as_scalar(v) for k, v in data.items()}, step=step)

    def log_generations(self, samples: Samples, step: int) -> None:
        # upstream's layout: one row per validation, step then input/output/score of each sample
        columns = ["step"] + [f"{name}_{i + 1}" for i in range(len(samples)) for name in ("input", "output", "score")]
        row = [step] + [value for sample in samples for value in sample]
        self._run.log({"val/generations": self._wandb.Table(columns=columns, data=[row])}, step=step)

    def log_artifacts(self, paths: Sequence[str], step: int) -> None:
        self._run.log({_image_name(p): self._wandb.Image(p) for p in paths}, step=step)

    def finish(self) -> None:
        self._run.finish()
        # finish() leaves wandb's service process (wandb-core) running until the interpreter exits; a driver
        # that goes on after training (verl.train) should not keep it, unless the caller has a run of its own
        if getattr(self._wandb, "run", None) is None and hasattr(self._wandb, "teardown"):
            self._wandb.teardown()


# ---------------------------------------------------------------------------------------------------------------
# mlflow
# ---------------------------------------------------------------------------------------------------------------

# mlflow accepts alphanumerics, underscores, dashes, periods, spaces, colons and slashes in names.
_MLFLOW_BAD_CHARS = re.compile(r"[^0-9A-Za-z_\-. :/]")
_MLFLOW_SLASHES = re.compile(r"/{2,}")
_MLFLOW_PARAMS_PER_CALL = 100
_MLFLOW_PARAM_VALUE_LIMIT = 500
# stores that mlflow opens through SQLAlchemy (absent from mlflow-skinny)
_MLFLOW_SQL_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")


def sanitize_mlflow_key(key: str) -> str:
    """``val-core/gsm8k/acc/mean@4`` -> ``val-core/gsm8k/acc/mean_at_4``; other rejected characters -> ``_``;
    runs of slashes -> one (mlflow refuses ``a//b``)."""
    return _MLFLOW_SLASHES.sub("/", _MLFLOW_BAD_CHARS.sub("_", key.replace("@", "_at_")))


class _MlflowLoggingAdapter:
    """Upstream's mlflow metric logger: each step's numeric values go to ``mlflow.log_metrics`` (the active run)
    under sanitized names, with a warning the first time a key is renamed."""

    def __init__(self) -> None:
        self.logger = logging.getLogger(__name__)
        self._warned: set[str] = set()

    def log(self, data: Mapping[str, Any], step: int) -> None:
        import mlflow

        metrics = {}
        for key, value in numeric_metrics(data).items():
            name = sanitize_mlflow_key(key)
            if name != key and key not in self._warned:
                self._warned.add(key)
                self.logger.warning("[MLflow] metric key %r renamed to %r (mlflow does not accept the original)",
                                    key, name)
            metrics[name] = float(value)
        mlflow.log_metrics(metrics=metrics, step=step)

    def finish(self) -> None:
        import mlflow

        mlflow.end_run()


def mlflow_tracking_uri(log_dir: str) -> str:
    """$MLFLOW_TRACKING_URI, else a file store in ``<log_dir>/mlruns``; an SQL store needs SQLAlchemy."""
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        # mlflow 3 keeps the file store in maintenance and refuses it unless asked: it is the one local store
        # that works with mlflow-skinny (no SQLAlchemy), so the default asks for it
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        return "file:" + os.path.abspath(os.path.join(log_dir, "mlruns"))
    scheme = uri.split(":", 1)[0].split("+", 1)[0]
    if scheme in _MLFLOW_SQL_SCHEMES and importlib.util.find_spec("sqlalchemy") is None:
        raise ImportError(f"MLFLOW_TRACKING_URI={uri} is a database store, which mlflow opens with SQLAlchemy, and "
                          "SQLAlchemy is not installed (mlflow-skinny leaves it out); `pip install sqlalchemy "
                          "alembic`, or unset MLFLOW_TRACKING_URI to use the local file store in the report folder")
    return uri


class MlflowBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict[str, Any] | None,
                 log_dir: str) -> None:
        try:
            import mlflow
        except ImportError as exc:
            raise _missing("mlflow", "mlflow") from exc
        self.tracking_uri = mlflow_tracking_uri(log_dir)
        mlflow.set_tracking_uri(self.tracking_uri)
        mlflow.set_experiment(project_name)
        self._mlflow = mlflow
        self._run = mlflow.start_run(run_name=experiment_name)
        self.run_id: str = self._run.info.run_id
        self._metrics = _MlflowLoggingAdapter()
        if config:
            params = {sanitize_mlflow_key(k): str(v)[:_MLFLOW_PARAM_VALUE_LIMIT]
                      for k, v in flatten_dict(config).items()}
            items = list(params.items())
            for i in range(0, len(items), _MLFLOW_PARAMS_PER_CALL):
                mlflow.log_params(dict(items[i:i + _MLFLOW_PARAMS_PER_CALL]))

    def log(self, data: dict[str, Any], step: int) -> None:
        self._metrics.log(data, step)

    def log_generations(self, samples: Samples, step: int) -> None:
        rows = [{"input": i, "output": o, "score": s} for i, o, s in samples]
        self._mlflow.log_text(json.dumps(rows, indent=2, ensure_ascii=False), f"val_generations_step_{step}.json")

    def log_artifacts(self, paths: Sequence[str], step: int) -> None:
        for path in paths:
            self._mlflow.log_artifact(path, artifact_path="report")

    def finish(self) -> None:
        self._mlflow.end_run()


# ---------------------------------------------------------------------------------------------------------------
# swanlab
# ---------------------------------------------------------------------------------------------------------------


class SwanlabBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict[str, Any] | None,
                 log_dir: str) -> None:
        try:
            import swanlab
        except ImportError as exc:
            raise _missing("swanlab", "tracking") from exc
        mode = os.environ.get("SWANLAB_MODE") or ("online" if os.environ.get("SWANLAB_API_KEY") else "offline")
        if not os.environ.get("SWANLAB_MODE") and mode == "offline":
            print("swanlab: SWANLAB_MODE and SWANLAB_API_KEY are unset -> offline mode "
                  "(upload later with `swanlab sync <run folder>`)", file=sys.stderr)
        self.log_dir = os.environ.get("SWANLAB_LOG_DIR") or os.path.join(log_dir, "swanlog")
        os.makedirs(self.log_dir, exist_ok=True)
        self._swanlab = swanlab
        self._run = swanlab.init(project=project_name, name=experiment_name, config=config or {},
                                 log_dir=self.log_dir, mode=mode)

    def log(self, data: dict[str, Any], step: int) -> None:
        metrics = numeric_metrics(data)
        if metrics:
            self._swanlab.log(metrics, step=step)

    def log_generations(self, samples: Samples, step: int) -> None:
        text = "\n\n".join(f"input: {i}\noutput: {o}\nscore: {s}" for i, o, s in samples)
        self._swanlab.log({"val/generations": self._swanlab.Text(text)}, step=step)

    def log_artifacts(self, paths: Sequence[str], step: int) -> None:
        self._swanlab.log({_image_name(p): self._swanlab.Image(p) for p in paths}, step=step)

    def finish(self) -> None:
        self._swanlab.finish()
