"""Experiment tracking: one ``Tracking`` object fans each step's metrics out to the chosen backends.

Backends (``trainer.logger`` in the config; a name or a list of names):

- ``console``: one line per step on stdout, ``step:N - key:value - ...`` with keys sorted,
- ``tensorboard``: event files under ``$TENSORBOARD_DIR``, else ``<log_dir>/tensorboard``,
  else ``tensorboard_log/<project>/<experiment>``,
- ``wandb``: imported only when chosen; offline unless ``WANDB_MODE`` or ``WANDB_API_KEY`` is set,
- ``mlflow``: imported only when chosen; ``$MLFLOW_TRACKING_URI``, else a local ``file:`` store in ``<log_dir>/mlruns``,
- ``file`` / ``jsonl``: one JSON object per step (``{"step": N, key: value, ...}``) appended to
  ``<log_dir>/metrics.jsonl`` — the input of :func:`verl.trainer.run_report.write_run_report`.
"""

from __future__ import annotations

import atexit
import json
import math
import numbers
import os
import re
import sys
from collections.abc import Mapping
from typing import Any, Protocol

from omegaconf import DictConfig, OmegaConf

__all__ = ["Tracking", "format_console_line", "format_value", "flatten_dict", "sanitize_mlflow_key", "SUPPORTED_BACKENDS"]

SUPPORTED_BACKENDS = ("console", "tensorboard", "wandb", "mlflow", "file", "jsonl")
# trainer.log_val_generations samples, next to metrics.jsonl.
GENERATIONS_FILE = "val_generations.jsonl"


class _Backend(Protocol):
    def log(self, data: dict[str, Any], step: int) -> None: ...

    def finish(self) -> None: ...


# ---------------------------------------------------------------------------------------------------------------
# value helpers
# ---------------------------------------------------------------------------------------------------------------


def _as_scalar(value: Any) -> Any:
    """numpy / torch scalars -> Python numbers; anything else unchanged."""
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        return value.item()
    return value


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
    def log(self, data: dict[str, Any], step: int) -> None:
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

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        path = os.path.join(os.path.dirname(os.path.abspath(self.path)), GENERATIONS_FILE)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "samples": [{"input": i, "output": o, "score": s}
                                                          for i, o, s in samples]}, ensure_ascii=False) + "\n")

    def finish(self) -> None:
        if not self._fh.closed:
            self._fh.close()


class _TensorboardBackend:
    def __init__(self, log_dir: str) -> None:
        from torch.utils.tensorboard import SummaryWriter

        os.makedirs(log_dir, exist_ok=True)
        self.log_dir = log_dir
        self._writer = SummaryWriter(log_dir=log_dir)

    def log(self, data: dict[str, Any], step: int) -> None:
        for key, value in data.items():
            value = _as_scalar(value)
            if isinstance(value, numbers.Number):
                self._writer.add_scalar(key, value, step)
        self._writer.flush()

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        text = "\n\n".join(f"**input**: {i}\n\n**output**: {o}\n\n**score**: {s}" for i, o, s in samples)
        self._writer.add_text("val/generations", text, step)
        self._writer.flush()

    def finish(self) -> None:
        self._writer.close()


class _WandbBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict[str, Any] | None) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise ImportError("trainer.logger includes 'wandb' but wandb is not installed; "
                              "run `pip install verl[wandb]` (or `pip install wandb`), or drop 'wandb' from "
                              "trainer.logger") from exc
        settings: dict[str, Any] = {}
        if not os.environ.get("WANDB_MODE") and not os.environ.get("WANDB_API_KEY"):
            # Without credentials an online init would prompt for a login or fail; offline runs can be
            # uploaded later with `wandb sync`.
            settings["mode"] = "offline"
            print("wandb: WANDB_MODE and WANDB_API_KEY are unset -> offline mode "
                  "(set WANDB_MODE=online to sync live)", file=sys.stderr)
        self._wandb = wandb
        self._run = wandb.init(project=project_name, name=experiment_name, config=config, **settings)

    def log(self, data: dict[str, Any], step: int) -> None:
        self._run.log({k: _as_scalar(v) for k, v in data.items()}, step=step)

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        import wandb

        # upstream's layout: one row per validation, step then input/output/score of each sample
        columns = ["step"] + [f"{name}_{i + 1}" for i in range(len(samples)) for name in ("input", "output", "score")]
        row = [step] + [value for sample in samples for value in sample]
        self._run.log({"val/generations": wandb.Table(columns=columns, data=[row])}, step=step)

    def finish(self) -> None:
        self._run.finish()


# mlflow accepts alphanumerics, underscores, dashes, periods, spaces, colons and slashes in names.
_MLFLOW_BAD_CHARS = re.compile(r"[^0-9A-Za-z_\-. :/]")
_MLFLOW_PARAMS_PER_CALL = 100
_MLFLOW_PARAM_VALUE_LIMIT = 500


def sanitize_mlflow_key(key: str) -> str:
    """``val-core/gsm8k/acc/mean@4`` -> ``val-core/gsm8k/acc/mean_at_4``; other rejected characters -> ``_``."""
    return _MLFLOW_BAD_CHARS.sub("_", key.replace("@", "_at_"))


class _MlflowBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict[str, Any] | None,
                 log_dir: str) -> None:
        try:
            import mlflow
        except ImportError as exc:
            raise ImportError("trainer.logger includes 'mlflow' but mlflow is not installed; "
                              "run `pip install verl[mlflow]` (or `pip install mlflow`), or drop 'mlflow' from "
                              "trainer.logger") from exc
        uri = os.environ.get("MLFLOW_TRACKING_URI") or "file:" + os.path.abspath(os.path.join(log_dir, "mlruns"))
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(project_name)
        self._mlflow = mlflow
        self._run = mlflow.start_run(run_name=experiment_name)
        if config:
            params = {sanitize_mlflow_key(k): str(v)[:_MLFLOW_PARAM_VALUE_LIMIT]
                      for k, v in flatten_dict(config).items()}
            items = list(params.items())
            for i in range(0, len(items), _MLFLOW_PARAMS_PER_CALL):
                mlflow.log_params(dict(items[i:i + _MLFLOW_PARAMS_PER_CALL]))

    def log(self, data: dict[str, Any], step: int) -> None:
        metrics = {}
        for key, value in data.items():
            value = _as_scalar(value)
            if isinstance(value, numbers.Number):
                metrics[sanitize_mlflow_key(key)] = float(value)
        self._mlflow.log_metrics(metrics, step=step)

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        rows = [{"input": i, "output": o, "score": s} for i, o, s in samples]
        self._mlflow.log_text(json.dumps(rows, indent=2, ensure_ascii=False), f"val_generations_step_{step}.json")

    def finish(self) -> None:
        self._mlflow.end_run()


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
            return _ConsoleBackend()
        if name == "file":
            self.metrics_path = os.path.join(self.log_dir, "metrics.jsonl")
            return _JsonlBackend(self.metrics_path)
        if name == "tensorboard":
            return _TensorboardBackend(os.environ.get("TENSORBOARD_DIR") or os.path.join(self.log_dir, "tensorboard"))
        if name == "wandb":
            return _WandbBackend(self.project_name, self.experiment_name, config)
        if name == "mlflow":
            return _MlflowBackend(self.project_name, self.experiment_name, config, self.log_dir)
        raise AssertionError(f"backend {name!r} passed validation but has no constructor")

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

    def log_generations(self, samples: list[tuple[str, str, float]], step: int) -> None:
        """trainer.log_val_generations: (input, output, score) samples, to every backend that can show text."""
        if getattr(self, "_finished", False):
            raise RuntimeError("Tracking.log_generations called after finish()")
        for logger in self.logger.values():
            if hasattr(logger, "log_generations"):
                logger.log_generations(samples, step)

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

