"""The compact console: one aligned row per step with the handful of numbers a person watches.

``trainer.console_format=compact`` (the default) prints, for PPO-family runs::

     step  train reward  val score  resp len        KL   entropy  step time  tokens/s
        0                   0.2031
        1        0.3125               31.4   0.0002134     0.812      71.3s       95.1

and for SFT (``verl.trainer.fsdp_sft_trainer``) the columns are step, loss, val loss, lr, grad norm, step time,
tokens/s. A metric the step did not produce is left blank (the val score appears only on validation steps).
``trainer.console_format=full`` keeps upstream's ``step:N - key:value - ...`` line of every numeric metric.

Rows are plain text on stdout: no colours or cursor codes, so a log file or a CI page reads the same as a
terminal. On a terminal the rich progress bar (:mod:`verl.trainer.progress`) redirects stdout through its own
console, which is what keeps these rows scrolling above the live bar instead of being overwritten by it.
Every metric still goes to ``metrics.jsonl`` and the trackers; this only chooses what the console shows.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = [
    "CONSOLE_FORMATS",
    "Column",
    "ConsoleTable",
    "PPO_COLUMNS",
    "SFT_COLUMNS",
    "columns_for_config",
    "format_cell",
    "val_score",
]

CONSOLE_FORMATS = ("compact", "full")
# On a terminal the header comes back every this many rows so it stays on screen; a file gets it once.
HEADER_EVERY_TTY = 20

Extractor = Callable[[Mapping[str, Any]], "float | None"]


@dataclass(frozen=True)
class Column:
    header: str
    width: int
    value: Extractor
    unit: str = ""
    digits: int = 4  # significant digits: 3 where the fourth is noise (lengths, times, rates)


def _number(value: Any) -> float | None:
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Number):
        return None
    return float(value)


def _first(*keys: str) -> Extractor:
    """The first of ``keys`` present with a numeric value."""

    def pick(metrics: Mapping[str, Any]) -> float | None:
        for key in keys:
            if key in metrics:
                value = _number(metrics[key])
                if value is not None:
                    return value
        return None

    return pick


def _ratio(numerator: str, denominator: str) -> Extractor:
    def pick(metrics: Mapping[str, Any]) -> float | None:
        top, bottom = _number(metrics.get(numerator)), _number(metrics.get(denominator))
        if top is None or bottom is None or bottom <= 0:
            return None
        return top / bottom

    return pick


def val_score(metrics: Mapping[str, Any]) -> float | None:
    """The validation headline: ``val-core/<source>/<reward|acc>/mean@N``, averaged over data sources when
    there are several (each source's own value stays in metrics.jsonl); None when validation did not run."""
    values = [_number(v) for k, v in metrics.items() if k.startswith("val-core/") and "/mean@" in k]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _tokens_per_s(metrics: Mapping[str, Any]) -> float | None:
    # The whole job's tokens over the step's wall time; perf/throughput is the same divided by the number of
    # training processes, so it is only the fallback when the token count is missing.
    whole_job = _ratio("perf/total_num_tokens", "timing_s/step")(metrics)
    return whole_job if whole_job is not None else _first("perf/throughput")(metrics)


PPO_COLUMNS: tuple[Column, ...] = (
    Column("train reward", 12, _first("critic/score/mean", "critic/rewards/mean")),
    Column("val score", 9, val_score),
    Column("resp len", 8, _first("response_length/mean"), digits=3),
    # actor/kl_loss exists only with actor.use_kl_loss; otherwise the PPO-ratio KL to the rollout policy.
    Column("KL", 10, _first("actor/kl_loss", "actor/ppo_kl")),
    Column("entropy", 8, _first("actor/entropy")),
    Column("step time", 9, _first("timing_s/step"), unit="s", digits=3),
    Column("tokens/s", 8, _tokens_per_s, digits=3),
)

SFT_COLUMNS: tuple[Column, ...] = (
    Column("loss", 8, _first("train/loss")),
    Column("val loss", 8, _first("val/loss")),
    Column("lr", 9, _first("train/lr")),
    Column("grad norm", 9, _first("train/grad_norm")),
    Column("step time", 9, _first("timing_s/step"), unit="s", digits=3),
    Column("tokens/s", 8, _ratio("train/tokens", "timing_s/step"), digits=3),
)


def columns_for_config(config: Mapping[str, Any] | None) -> tuple[Column, ...]:
    """SFT's columns for an sft_trainer config (it has no actor_rollout_ref), PPO's otherwise."""
    if config is not None and "actor_rollout_ref" not in config and "optim" in config and "model" in config:
        return SFT_COLUMNS
    return PPO_COLUMNS


def format_cell(value: float | None, width: int, unit: str = "", digits: int = 4) -> str:
    """``digits`` significant digits (all of the integer part) in ``width`` characters, right-aligned; exponent
    form below 1e-3 and from 1e5; blank for a missing value."""
    if value is None:
        return " " * width
    if math.isnan(value) or math.isinf(value):
        text = str(value)
    elif value == 0:
        text = "0"
    else:
        magnitude = abs(value)
        if magnitude >= 1e5 or magnitude < 1e-3:
            text = f"{value:.2e}"
        else:
            decimals = max(0, digits - 1 - math.floor(math.log10(magnitude)))
            text = f"{value:.{decimals}f}"
    return f"{text}{unit}".rjust(width)


class ConsoleTable:
    """``log(metrics, step)`` prints one row (and the header first); ``stream`` defaults to stdout at call time
    so that a progress bar's redirect of sys.stdout is honoured."""

    def __init__(self, columns: Sequence[Column] = PPO_COLUMNS, stream: TextIO | None = None,
                 header_every: int | None = None) -> None:
        self.columns = tuple(columns)
        self._stream = stream
        self._header_every = header_every
        self._rows_since_header: int | None = None  # None: no header printed yet

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stdout

    def header(self) -> str:
        return "  ".join([" step".rjust(5)] + [c.header.rjust(max(c.width, len(c.header))) for c in self.columns])

    def row(self, metrics: Mapping[str, Any], step: int) -> str:
        cells = [str(step).rjust(5)]
        for column in self.columns:
            width = max(column.width, len(column.header))
            cells.append(format_cell(column.value(metrics), width, column.unit, column.digits))
        return "  ".join(cells).rstrip()

    def _header_due(self) -> bool:
        if self._rows_since_header is None:
            return True
        every = self._header_every
        if every is None:
            isatty = getattr(self.stream, "isatty", None)
            every = HEADER_EVERY_TTY if callable(isatty) and isatty() else 0
        return every > 0 and self._rows_since_header >= every

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        lines = []
        if self._header_due():
            lines.append(self.header())
            self._rows_since_header = 0
        lines.append(self.row(metrics, step))
        self._rows_since_header = (self._rows_since_header or 0) + 1
        print("\n".join(lines), file=self.stream, flush=True)
