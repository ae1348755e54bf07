"""The learning curve as text: one row per step with the training reward and, where measured, the validation
score, plus a bar so the trend is visible in a terminal or a CI log."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verl.trainer.run_report import read_metrics_jsonl

_TRAIN_KEY = "critic/score/mean"


def _val_key(rows: Sequence[dict[str, Any]]) -> str | None:
    keys = sorted({k for r in rows for k in r if k.startswith("val-core/") and "/mean@" in k})
    return keys[0] if keys else None


def format_learning_curve(rows: Sequence[dict[str, Any]], width: int = 30) -> str:
    val_key = _val_key(rows)
    lines = [f"{'step':>5}  {'train reward':>12}  {'val score':>9}  (bar: train reward, 0..1)"]
    for row in sorted(rows, key=lambda r: r.get("step", 0)):
        train = row.get(_TRAIN_KEY)
        val = row.get(val_key) if val_key else None
        if train is None and val is None:
            continue
        bar = "#" * round(max(0.0, min(1.0, train)) * width) if train is not None else ""
        lines.append(f"{row.get('step', 0):>5}  {_fmt(train):>12}  {_fmt(val):>9}  {bar}")
    if val_key:
        vals = [(r["step"], r[val_key]) for r in rows if val_key in r]
        if len(vals) >= 2:
            lines.append(f"validation ({val_key}): step {vals[0][0]} {vals[0][1]:.3f} -> step {vals[-1][0]} {vals[-1][1]:.3f}")
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def print_learning_curve(metrics_jsonl: str) -> None:
    print(format_learning_curve(read_metrics_jsonl(metrics_jsonl)))
