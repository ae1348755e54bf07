"""End-of-run report from the per-step metrics JSONL (written by the ``file`` tracking backend).

``write_run_report(metrics_jsonl, out_dir)`` writes into ``out_dir``:

- ``metrics.csv``: one row per step, every metric seen in any step as a column (blank where absent),
- PNG plots, each only when its metrics exist: ``reward.png`` (train score/reward, validation scores as
  points), ``response_length.png``, ``kl.png``, ``entropy.png``, ``loss.png`` (SFT's train and validation loss),
  ``timing.png``,
- ``summary.json``: first / last / best of the train score, of each validation score and of each loss (best = lowest),
  wall time,
- ``README.md``: what each file is.

Command line: ``python -m verl.trainer.run_report <metrics.jsonl> <out_dir>``.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

__all__ = ["write_run_report", "read_metrics_jsonl", "summarize_run", "main"]

TRAIN_SCORE_KEYS = ("critic/score/mean", "critic/rewards/mean")
VALIDATION_PREFIXES = ("val-core/", "val/")
LENGTH_KEYS = ("response_length/mean", "response_length/max", "response_length/min", "response_length/clip_ratio")
KL_KEYS = ("actor/ppo_kl", "actor/kl_loss", "actor/reward_kl_penalty")
ENTROPY_KEYS = ("actor/entropy",)
LOSS_KEYS = ("train/loss", "val/loss")  # the SFT trainer's; lower is better, so they are not validation scores
TIMING_PREFIX = "timing_s/"

_FILE_DESCRIPTIONS = {
    "metrics.csv": "every logged metric, one row per step (blank = not logged that step)",
    "reward.png": "train score / reward per step; validation scores as points",
    "response_length.png": "mean response length (min-max band) and the fraction clipped at the max length",
    "kl.png": "KL between the policy and the old / reference policy",
    "entropy.png": "policy entropy over response tokens",
    "loss.png": "SFT loss per step: train (every step) and validation (where it ran)",
    "timing.png": "seconds per stage of each step (log scale)",
    "summary.json": "first / last / best validation and train scores, wall time",
}


# ---------------------------------------------------------------------------------------------------------------
# reading
# ---------------------------------------------------------------------------------------------------------------


def read_metrics_jsonl(path: str) -> list[dict[str, Any]]:
    """Rows sorted by step; lines with the same step (e.g. validation logged separately, or a resumed run)
    are merged, the later line winning for a key logged twice."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"run report: metrics file {path!r} does not exist; include 'file' in "
                                f"trainer.logger so the trainer writes it")
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    by_step: dict[int, dict[str, Any]] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if lineno == len(lines):  # a run killed mid-write leaves a partial last line; the rest is sound
                warnings.warn(f"run report: skipping the truncated last line {lineno} of {path}", stacklevel=2)
                continue
            raise ValueError(f"run report: {path}:{lineno} is not valid JSON ({exc.msg})") from exc
        if not isinstance(record, dict) or "step" not in record:
            raise ValueError(f"run report: {path}:{lineno} must be a JSON object with a 'step' key")
        step = int(record.pop("step"))
        by_step.setdefault(step, {"step": step}).update(record)
    return [by_step[s] for s in sorted(by_step)]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows where ``key`` holds a finite number."""
    steps, values = [], []
    for row in rows:
        v = _number(row.get(key))
        if v is not None and math.isfinite(v):
            steps.append(row["step"])
            values.append(v)
    return steps, values


def _all_keys(rows: Sequence[dict[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for row in rows:
        keys.update(dict.fromkeys(k for k in row if k != "step"))
    return sorted(keys)


def _validation_keys(keys: Sequence[str]) -> list[str]:
    # Spreads (".../std") are not scores; they would make "best" meaningless.
    return [k for k in keys if k.startswith(VALIDATION_PREFIXES) and not k.endswith("/std") and k not in LOSS_KEYS]


# ---------------------------------------------------------------------------------------------------------------
# csv and summary
# ---------------------------------------------------------------------------------------------------------------


def _write_csv(rows: Sequence[dict[str, Any]], path: str) -> None:
    columns = ["step", *_all_keys(rows)]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, restval="")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)


def _first_last_best(rows: Sequence[dict[str, Any]], key: str, lower_is_better: bool = False) -> dict[str, Any] | None:
    steps, values = _series(rows, key)
    if not values:
        return None
    sign = -1.0 if lower_is_better else 1.0
    best = max(range(len(values)), key=lambda i: sign * values[i])  # first step reaching the best
    return {"first": values[0], "first_step": steps[0], "last": values[-1], "last_step": steps[-1],
            "best": values[best], "best_step": steps[best]}


def summarize_run(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The summary.json content (without the file list)."""
    keys = _all_keys(rows)
    summary: dict[str, Any] = {
        "num_steps": len(rows),
        "first_step": rows[0]["step"] if rows else None,
        "last_step": rows[-1]["step"] if rows else None,
    }
    summary["train_score"] = None
    for key in TRAIN_SCORE_KEYS:
        if (stats := _first_last_best(rows, key)) is not None:
            summary["train_score"] = {"key": key, **stats}
            break
    summary["validation"] = {k: stats for k in _validation_keys(keys) if (stats := _first_last_best(rows, k))}
    losses = {k: stats for k in LOSS_KEYS if (stats := _first_last_best(rows, k, lower_is_better=True))}
    if losses:
        summary["loss"] = losses
    step_times = _series(rows, TIMING_PREFIX + "step")[1]
    summary["total_wall_time_s"] = sum(step_times) if step_times else None
    return summary


# ---------------------------------------------------------------------------------------------------------------
# plots (object-oriented matplotlib on the Agg canvas: no pyplot, no global backend switch)
# ---------------------------------------------------------------------------------------------------------------


def _figure(title: str, ylabel: str) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(8, 4.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers, also on 3-step runs
    ax.set_title(title)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    return fig, ax


def _line(ax: Any, steps: list[int], values: list[float], label: str, **kwargs: Any) -> None:
    # Markers keep short runs (a handful of steps, or one) visible; on long runs they would be clutter.
    style = {"marker": "o" if len(steps) <= 50 else None, "markersize": 3, "linewidth": 1.5, **kwargs}
    ax.plot(steps, values, label=label, **style)


def _save(fig: Any, out_dir: str, name: str) -> str:
    fig.savefig(os.path.join(out_dir, name))
    return name


def _plot_reward(rows: Sequence[dict[str, Any]], keys: list[str], out_dir: str) -> str | None:
    val_keys = _validation_keys(keys)
    train_keys = [k for k in TRAIN_SCORE_KEYS if k in keys]
    if not train_keys and not val_keys:
        return None
    fig, ax = _figure("Reward", "score / reward")
    for key in train_keys:
        _line(ax, *_series(rows, key), label=key)
    markers = "sD^v<>pP*X"
    for i, key in enumerate(val_keys):
        steps, values = _series(rows, key)
        # Colours continue the cycle after the train lines, so a point never looks like part of a line.
        ax.scatter(steps, values, label=key, marker=markers[i % len(markers)], s=36, zorder=3,
                   color=f"C{(len(train_keys) + i) % 10}")
    ax.legend(fontsize="small", loc="best")
    return _save(fig, out_dir, "reward.png")


def _plot_response_length(rows: Sequence[dict[str, Any]], keys: list[str], out_dir: str) -> str | None:
    if not any(k in keys for k in LENGTH_KEYS):
        return None
    fig, ax = _figure("Response length", "tokens")
    if "response_length/mean" in keys:
        steps, mean = _series(rows, "response_length/mean")
        _line(ax, steps, mean, label="response_length/mean", color="tab:blue")
    if "response_length/min" in keys and "response_length/max" in keys:
        lo_steps, lo = _series(rows, "response_length/min")
        hi_steps, hi = _series(rows, "response_length/max")
        if lo_steps == hi_steps:
            ax.fill_between(lo_steps, lo, hi, color="tab:blue", alpha=0.15, label="min-max")
    handles, labels = ax.get_legend_handles_labels()
    if "response_length/clip_ratio" in keys:
        ax2 = ax.twinx()
        ax2.set_ylabel("clip ratio")
        ax2.set_ylim(-0.02, 1.02)
        _line(ax2, *_series(rows, "response_length/clip_ratio"), label="response_length/clip_ratio",
              color="tab:red", linestyle="--")
        h2, l2 = ax2.get_legend_handles_labels()
        handles, labels = handles + h2, labels + l2
    ax.legend(handles, labels, fontsize="small", loc="best")
    return _save(fig, out_dir, "response_length.png")


def _plot_lines(rows: Sequence[dict[str, Any]], keys: list[str], out_dir: str, wanted: Sequence[str],
                title: str, ylabel: str, name: str) -> str | None:
    present = [k for k in wanted if k in keys]
    if not present:
        return None
    fig, ax = _figure(title, ylabel)
    for key in present:
        _line(ax, *_series(rows, key), label=key)
    ax.legend(fontsize="small", loc="best")
    return _save(fig, out_dir, name)


def _plot_timing(rows: Sequence[dict[str, Any]], keys: list[str], out_dir: str) -> str | None:
    # Lines, not a stack: stage timers may nest (e.g. generation inside "gen"), and stacking would double count.
    stages = [k for k in keys if k.startswith(TIMING_PREFIX) and k != TIMING_PREFIX + "step"]
    has_step = TIMING_PREFIX + "step" in keys
    if not stages and not has_step:
        return None
    fig, ax = _figure("Time per stage", "seconds")
    if has_step:
        _line(ax, *_series(rows, TIMING_PREFIX + "step"), label="step (total)", color="black", linewidth=2.5)
    for key in stages:
        steps, values = _series(rows, key)
        positive = [(s, v) for s, v in zip(steps, values) if v > 0]  # log scale cannot show 0
        if positive:
            _line(ax, [s for s, _ in positive], [v for _, v in positive], label=key[len(TIMING_PREFIX):])
    ax.set_yscale("log")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return _save(fig, out_dir, "timing.png")


def _plot_all(rows: Sequence[dict[str, Any]], out_dir: str) -> list[str]:
    keys = _all_keys(rows)
    produced = [
        _plot_reward(rows, keys, out_dir),
        _plot_response_length(rows, keys, out_dir),
        _plot_lines(rows, keys, out_dir, KL_KEYS, "KL", "KL", "kl.png"),
        _plot_lines(rows, keys, out_dir, ENTROPY_KEYS, "Entropy", "nats per token", "entropy.png"),
        _plot_lines(rows, keys, out_dir, LOSS_KEYS, "Loss", "loss", "loss.png"),
        _plot_timing(rows, keys, out_dir),
    ]
    return [p for p in produced if p is not None]


# ---------------------------------------------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------------------------------------------


def _json_safe(value: Any) -> Any:
    """NaN / inf -> None, so summary.json is standard JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def _write_readme(out_dir: str, files: list[str], metrics_jsonl: str, summary: dict[str, Any]) -> None:
    lines = ["# Run report", "", f"Made from `{os.path.abspath(metrics_jsonl)}` ({summary['num_steps']} steps).", ""]
    lines += [f"- `{name}`: {_FILE_DESCRIPTIONS.get(name, '')}" for name in files]
    lines += ["", "Rebuild with `python -m verl.trainer.run_report <metrics.jsonl> <out_dir>`.", ""]
    with open(os.path.join(out_dir, "README.md"), "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines))


def write_run_report(metrics_jsonl: str, out_dir: str) -> dict[str, Any]:
    """Write metrics.csv, the plots, summary.json and README.md into ``out_dir``; return the summary."""
    rows = read_metrics_jsonl(metrics_jsonl)
    os.makedirs(out_dir, exist_ok=True)
    _write_csv(rows, os.path.join(out_dir, "metrics.csv"))
    plots = _plot_all(rows, out_dir)
    files = ["metrics.csv", *plots, "summary.json"]
    summary = _json_safe({**summarize_run(rows), "files": files + ["README.md"]})
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2)
        fh.write("\n")
    _write_readme(out_dir, files, metrics_jsonl, summary)
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl.trainer.run_report",
                                     description="CSV, plots and a summary from a run's metrics.jsonl")
    parser.add_argument("metrics_jsonl", help="the per-step metrics file written by the 'file' logger")
    parser.add_argument("out_dir", help="folder to write the report into (created if missing)")
    args = parser.parse_args(argv)
    summary = write_run_report(args.metrics_jsonl, args.out_dir)
    json.dump(summary, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
