"""What `verl.train` returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrainResult:
    """history: one dict per training step run by this call (the row logged to metrics.jsonl for it);
    final_validation: the last validation's metrics ({} when the run never validated); validations: every
    (step, metrics) pass; checkpoint_path: the last `global_step_N` folder saved by this call (None if none);
    report_dir: the run report (metrics.jsonl, plots, summary.json); summary: the run summary dict; finished:
    True when the folder already held a finished run and nothing was trained."""

    history: list[dict[str, float]] = field(default_factory=list)
    final_validation: dict[str, float] = field(default_factory=dict)
    validations: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    checkpoint_path: str | None = None
    report_dir: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    finished: bool = False

    @property
    def metrics_file(self) -> str | None:
        import os

        return os.path.join(self.report_dir, "metrics.jsonl") if self.report_dir else None
