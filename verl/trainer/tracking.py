"""Experiment tracking: one ``Tracking`` object fans each step's metrics out to the chosen backends.

Backends (``trainer.logger`` in the config; a name or a list of names):

- ``console``: one compact row per step on stdout (``trainer.console_format=compact``, the default), or
  upstream's ``step:N - key:value - ...`` line with keys sorted (``trainer.console_format=full``),
- ``tensorboard``: event files under ``$TENSORBOARD_DIR``, else ``<log_dir>/tensorboard``,
  else ``tensorboard_log/<project>/<experiment>``,
- ``wandb``: imported only when chosen; offline unless ``WANDB_MODE`` or ``WANDB_API_KEY`` is set,
- ``mlflow``: imported only when chosen; ``$MLFLOW_TRACKING_URI``, else a local ``file:`` store in ``<log_dir>/mlruns``,
- ``swanlab``: imported only when chosen; offline unless ``SWANLAB_MODE`` or ``SWANLAB_API_KEY`` is set,
- ``file`` / ``jsonl``: one JSON object per step (``{"step": N, key: value, ...}``) appended to
  ``<log_dir>/metrics.jsonl`` — the input of :func:`verl.trainer.run_report.write_run_report`.
"""

from __future__ import annotations

import atexit
import json
import math
import numbers
import os
import sys
import time
from collections.abc import Mapping
from typing import Any, Protocol

from omegaconf import DictConfig, OmegaConf

from verl.trainer.tracking_backends import (
    MlflowBackend,
    SwanlabBackend,
    TensorboardBackend,
    WandbBackend,
    _MlflowLoggingAdapter,
    flatten_dict,
    sanitize_mlflow_key,
)
from verl.trainer.tracking_backends import as_scalar as _as_scalar

__all__ = ["Tracking", "format_console_line", "format_value", "flatten_dict", "sanitize_mlflow_key", "SUPPORTED_BACKENDS",
           "_MlflowLoggingAdapter"]

SUPPORTED_BACKENDS = ("console", "tensorboard", "wandb", "mlflow", "swanlab", "file", "jsonl")
# trainer.log_val_generations samples, next to metrics.jsonl.
GENERATIONS_FILE = "val_generations.jsonl"


class _Backend(Protocol):
    def log(self, data: dict[str, Any], step: int) -> None: ...

    def finish(self) -> None: ...


# ---------------------------------------------------------------------------------------------------------------
# value helpers
# ---------------------------------------------------------------------------------------------------------------


def format_value(value: Any) -> str:
    """Compact, fixed-point where readable: about 4 significant digits, at least one decimal for floats.

    ints stay ints (``128``); floats keep a decimal point (``1.0``, ``2.5``, ``0.1235``, ``1234.6``);
    very small or very large magnitudes use exponent form (``1.235e-05``).
    """
    value = _as_scalar(value)
    if isinstance(value, bool) or isinstance(value, numbers.Integral):
        return str(int(value))
    v = float(value)
    if math.isnan(v) or math.isinf(v):
        return str(v)
    if v == 0.0:
        return "0.0"
    magnitude = abs(v)
    if not 1e-4 <= magnitude < 1e6:
        return f"{v:.3e}"
    decimals = max(1, 3 - math.floor(math.log10(magnitude)))
    text = f"{v:.{decimals}f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def format_console_line(data: Mapping[str, Any], step: int) -> str:
    """``step:3 - a:1.0 - b:2.5``: numeric metrics only, keys sorted (stable columns across steps)."""
    parts = [f"step:{step}"]
    for key in sorted(data):
        value = _as_scalar(data[key])
        if isinstance(value, numbers.Number):
            parts.append(f"{key}:{format_value(value)}")
    return " - ".join(parts)


def _plain_config(config: Any) -> dict[str, Any] | None:
    """An OmegaConf config or a mapping -> a plain, resolved dict."""
    if config is None:
        return None
    if isinstance(config, DictConfig):
        return OmegaConf.to_container(config, resolve=True)  # type: ignore[return-value]
    if isinstance(config, Mapping):
        return dict(config)
    raise TypeError(f"Tracking: config must be a dict or an OmegaConf DictConfig, got {type(config).__name__}")


# ---------------------------------------------------------------------------------------------------------------
# backends
# ---------------------------------------------------------------------------------------------------------------


class _ConsoleBackend:
    """trainer.console_format: ``compact`` one aligned row per step (verl.trainer.console_table), ``full``
    upstream's line of every numeric metric."""

    def __init__(self, console_format: str = "compact", config: dict[str, Any] | None = None) -> None:
        from verl.trainer.console_table import CONSOLE_FORMATS, ConsoleTable, columns_for_config

        if console_format not in CONSOLE_FORMATS:
            raise ValueError(f"trainer.console_format={console_format!r}: expected one of {list(CONSOLE_FORMATS)}")
        self._table = ConsoleTable(columns_for_config(config)) if console_format == "compact" else None

    def log(self, data: dict[str, Any], step: int) -> None:
        if self._table is not None:
            self._table.log(data, step)
            return
        print(format_console_line(data, step), file=sys.stdout, flush=True)

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        for i, (prompt, response, score) in enumerate(samples):
            print(f"[val generation {i} @ step {step}] score={score:.4g}\n[input] {prompt}\n[output] {response}",
                  file=sys.stdout, flush=True)

    def finish(self) -> None:
        pass


class _JsonlBackend:
    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        # Line-buffered append: every step is on disk as soon as it is logged, and a resumed run continues
        # the same file (the run report merges repeated steps, the later line winning).
        self._fh = open(path, "a", buffering=1, encoding="utf-8")

    def log(self, data: dict[str, Any], step: int) -> None:
        record = {"step": step, **{k: _as_scalar(v) for k, v in data.items()}}
        self._fh.write(json.dumps(record, default=str) + "\n")

    def start_run(self, step: int) -> list[str]:
        """A run that starts from scratch (``step`` 0) in a folder where an earlier run logged sets that run's lines
        aside, renamed with the time, so the report shows this run only; a resumed run (``step`` > 0) continues the
        file. Returns the names the earlier files were moved to."""
        if step > 0:
            return []
        folder = os.path.dirname(os.path.abspath(self.path))
        stamp = time.strftime("%Y%m%d-%H%M%S")
        moved = []
        for path in (self.path, os.path.join(folder, GENERATIONS_FILE)):
            if not os.path.exists(path) or os.path.getsize(path) == 0:
                continue
            stem, ext = os.path.splitext(path)
            aside = f"{stem}.before-{stamp}{ext}"
            if path == self.path:
                self._fh.close()
            os.replace(path, aside)
            if path == self.path:
                self._fh = open(path, "a", buffering=1, encoding="utf-8")
            moved.append(aside)
        if moved:
            print(f"[report] this run starts at step 0; the earlier run's lines in {folder} were moved to "
                  f"{', '.join(os.path.basename(m) for m in moved)}", flush=True)
        return moved

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        path = os.path.join(os.path.dirname(os.path.abspath(self.path)), GENERATIONS_FILE)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "samples": [{"input": i, "output": o, "score": s}
                                                          for i, o, s in samples]}, ensure_ascii=False) + "\n")

    def finish(self) -> None:
        if not self._fh.closed:
            self._fh.close()


def _canonical(name: str) -> str:
    # "jsonl" is our alias of upstream's "file" backend: both write the same metrics.jsonl once.
    return "file" if name == "jsonl" else name


# ---------------------------------------------------------------------------------------------------------------
# the fan-out
# ---------------------------------------------------------------------------------------------------------------


class Tracking:
    """Log each step's metrics to every chosen backend; ``finish()`` closes them (also run at interpreter exit)."""

    supported_backend = list(SUPPORTED_BACKENDS)

    def __init__(self, project_name: str, experiment_name: str, default_backend: str | list[str] = "console",
                 config: Any = None, log_dir: str | None = None) -> None:
        backends = [default_backend] if isinstance(default_backend, str) else list(default_backend)
        unknown = [b for b in backends if b not in SUPPORTED_BACKENDS]
        if unknown:
            raise ValueError(f"trainer.logger: unknown backend(s) {unknown}; known backends are "
                             f"{list(SUPPORTED_BACKENDS)}")
        self.project_name = project_name
        self.experiment_name = experiment_name
        self.log_dir = log_dir or os.path.join("tracking_logs", project_name, experiment_name)
        self.metrics_path: str | None = None
        self.last_step: int | None = None  # where log_artifacts puts the report's images by default
        plain_config = _plain_config(config)

        self.logger: dict[str, _Backend] = {}
        try:
            for name in dict.fromkeys(_canonical(b) for b in backends):  # de-duplicate, keep order
                self.logger[name] = self._make_backend(name, plain_config)
        except BaseException:
            self.finish()  # do not leave half-opened writers or runs behind
            raise
        self._finished = False
        atexit.register(self.finish)

    def _make_backend(self, name: str, config: dict[str, Any] | None) -> _Backend:
        if name == "console":
            trainer_section = (config or {}).get("trainer") or {}
            return _ConsoleBackend(trainer_section.get("console_format", "compact"), config)
        if name == "file":
            self.metrics_path = os.path.join(self.log_dir, "metrics.jsonl")
            return _JsonlBackend(self.metrics_path)
        if name == "tensorboard":
            return TensorboardBackend(os.environ.get("TENSORBOARD_DIR") or os.path.join(self.log_dir, "tensorboard"),
                                      config)
        if name == "wandb":
            return WandbBackend(self.project_name, self.experiment_name, config, self.log_dir)
        if name == "mlflow":
            return MlflowBackend(self.project_name, self.experiment_name, config, self.log_dir)
        if name == "swanlab":
            return SwanlabBackend(self.project_name, self.experiment_name, config, self.log_dir)
        raise AssertionError(f"backend {name!r} passed validation but has no constructor")

    def start_run(self, step: int) -> None:
        """Tell the backends the first step this run will log (0 from scratch, N when resumed), once, before it."""
        for backend in self.logger.values():
            start = getattr(backend, "start_run", None)
            if callable(start):
                start(step)

    def log(self, data: Mapping[str, Any], step: int, backend: str | list[str] | None = None) -> None:
        """Send ``data`` for ``step`` to all backends, or only to ``backend`` (a name or list of names)."""
        if getattr(self, "_finished", False):
            raise RuntimeError("Tracking.log called after finish(); create a new Tracking for a new run")
        if backend is not None:
            backend = [backend] if isinstance(backend, str) else backend
        only = None if backend is None else {_canonical(b) for b in backend}
        payload = dict(data)
        for name, logger in self.logger.items():
            if only is None or name in only:
                logger.log(payload, step)
        self.last_step = step if self.last_step is None else max(self.last_step, step)

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        """trainer.log_val_generations: (input, output, score) samples, to every backend that can show text."""
        if getattr(self, "_finished", False):
            raise RuntimeError("Tracking.log_generations called after finish()")
        for logger in self.logger.values():
            if hasattr(logger, "log_generations"):
                logger.log_generations(samples, step)

    def log_artifacts(self, paths: list[str], step: int | None = None) -> None:
        """The run report's PNGs, as images, to every backend that keeps files (tensorboard, wandb, mlflow,
        swanlab), at ``step`` (default: the last logged step, which the trackers require not to go back)."""
        if getattr(self, "_finished", False):
            raise RuntimeError("Tracking.log_artifacts called after finish(); log the report before finish()")
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(f"Tracking.log_artifacts: no such file(s) {missing}")
        if not paths:
            return
        at = step if step is not None else (self.last_step if self.last_step is not None else 0)
        for logger in self.logger.values():
            if hasattr(logger, "log_artifacts"):
                logger.log_artifacts(list(paths), at)

    def finish(self) -> None:
        """Flush and close every backend; safe to call more than once."""
        if getattr(self, "_finished", False):
            return
        self._finished = True
        atexit.unregister(self.finish)
        errors = []
        for name, logger in getattr(self, "logger", {}).items():
            try:
                logger.finish()
            except Exception as exc:  # close the others, then report
                errors.append(f"{name}: {exc!r}")
        if errors:
            raise RuntimeError(f"Tracking.finish: backends failed to close: {errors}")

