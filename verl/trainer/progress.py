"""A training-step progress bar with ETA, drawn on stderr so stdout stays a clean, parseable metric log.

On a terminal it is a rich bar (steps done / total, elapsed, ETA, a short metric summary). Forced on with
``VERL_PROGRESS=1`` while stderr is not a terminal (e.g. a log file), it prints one plain line per step instead,
since a redrawn bar would fill the file with control codes. Disabled, every method does nothing.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["TrainingProgress", "progress_enabled_by_default", "summarize_metrics"]

# Shown in the bar, in this order, when present: (metric name, short label).
_SUMMARY_KEYS: tuple[tuple[str, str], ...] = (
    ("critic/score/mean", "score"),
    ("response_length/mean", "len"),
    ("actor/ppo_kl", "kl"),
    ("actor/entropy", "ent"),
    ("timing_s/step", "s/step"),
)


_WHOLE_RUN_S = 30 * 24 * 3600.0


def progress_enabled_by_default() -> bool:
    """``VERL_PROGRESS`` = 1/true/yes forces the bar on, 0/false/no off; unset: on when stderr is a terminal."""
    flag = os.environ.get("VERL_PROGRESS", "").strip().lower()
    if flag in ("1", "true", "yes", "on"):
        return True
    if flag in ("0", "false", "no", "off"):
        return False
    return sys.stderr.isatty()


def summarize_metrics(metrics: Mapping[str, Any]) -> str:
    """``score 0.41 | len 87.2 | kl 0.0021`` from the headline metrics that are present."""
    parts = []
    for key, label in _SUMMARY_KEYS:
        if key in metrics:
            parts.append(f"{label} {float(metrics[key]):.4g}")
    return " | ".join(parts)


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class TrainingProgress:
    """``advance()`` once per finished step; ``close()`` at the end (or use it as a context manager)."""

    def __init__(self, total_steps: int, initial: int = 0, enabled: bool | None = None,
                 description: str = "training") -> None:
        if total_steps < 0 or initial < 0:
            raise ValueError(f"TrainingProgress: total_steps ({total_steps}) and initial ({initial}) must be >= 0")
        self.total_steps = total_steps
        self.completed = initial
        self.enabled = progress_enabled_by_default() if enabled is None else enabled
        self._initial = initial
        self._start = time.monotonic()
        self._progress = None
        self._task = None
        self._description = description
        if self.enabled and sys.stderr.isatty():
            self._start_rich()

    def _start_rich(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        # When stdout shares the terminal, rich must route prints through the bar (above it) or its redraws
        # would overwrite them; when stdout is a file or pipe it is left untouched.
        share_terminal = sys.stdout.isatty()
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[summary]}"),
            console=Console(file=sys.stderr), refresh_per_second=2,
            redirect_stdout=share_terminal, redirect_stderr=share_terminal,
            # rich estimates speed from the steps of the last 30 s by default; a training step takes longer than
            # that, so the ETA would stay unknown. Averaging over the whole run gives one from the second step.
            speed_estimate_period=_WHOLE_RUN_S,
        )
        self._progress.start()
        self._task = self._progress.add_task(self._description, total=self.total_steps, completed=self.completed,
                                             summary="")

    def advance(self, metrics_summary: str = "") -> None:
        """Count one finished step and show ``metrics_summary`` (see :func:`summarize_metrics`)."""
        self.completed += 1
        if not self.enabled:
            return
        if self._progress is not None:
            self._progress.update(self._task, advance=1, summary=metrics_summary)
            return
        print(self._plain_line(metrics_summary), file=sys.stderr, flush=True)

    def _plain_line(self, metrics_summary: str) -> str:
        elapsed = time.monotonic() - self._start
        done_here = self.completed - self._initial
        remaining = max(0, self.total_steps - self.completed)
        eta = _clock(elapsed / done_here * remaining) if done_here > 0 else "?"
        pct = 100.0 * self.completed / self.total_steps if self.total_steps else 100.0
        line = (f"[{self._description}] step {self.completed}/{self.total_steps} ({pct:.0f}%) "
                f"elapsed {_clock(elapsed)} eta {eta}")
        return f"{line} | {metrics_summary}" if metrics_summary else line

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def __enter__(self) -> TrainingProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
