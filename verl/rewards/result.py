"""`RewardResult`: what a compute_score function may return instead of a float or a dict (upstream's names).

    return RewardResult(score=1.0, metrics={"accuracy": 1.0}).add_metric("format_ok", 1.0, condition=strict)

The reward managers take it as they take a dict: `score` is the reward, each metric becomes a `reward_extra_info`
field (and so must be reported for every sample, as a dict's keys must), `metadata` rides along under the key
"metadata" when non-empty. It also reads like that dict (`result["score"]`, `"accuracy" in result`, `keys()`,
`items()`), so code written for dict results keeps working. `MetricConfig` says which metric names are headline
("core") metrics and which may be missing for some samples ("sparse").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

_METADATA = "metadata"


@dataclass
class RewardResult:
    score: float | int
    metrics: dict[str, float | int] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The equivalent dict result: "score", one key per metric, and "metadata" when there is any."""
        flat: dict[str, Any] = {"score": self.score, **self.metrics}
        if self.metadata:
            flat[_METADATA] = self.metadata
        return flat

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardResult:
        """Read a dict result: every key besides "score" and "metadata" is a metric. `data` is left unchanged."""
        if "score" not in data:
            raise ValueError(f"Dictionary must contain 'score' key (got keys {sorted(data)})")
        metrics = {k: v for k, v in data.items() if k not in ("score", _METADATA)}
        return cls(score=data["score"], metrics=metrics, metadata=dict(data.get(_METADATA) or {}))

    def add_metric(self, name: str, value: float | int, condition: bool = True) -> RewardResult:
        """Record `name` only when `condition` holds; returns self so calls chain."""
        if condition:
            self.metrics[name] = value
        return self

    def keys(self) -> list[str]:
        return list(self.to_dict())

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(self.to_dict().items())

    def __getitem__(self, key: str) -> Any:
        flat = self.to_dict()
        if key not in flat:
            raise KeyError(f"Key {key!r} not found in RewardResult (keys: {list(flat)})")
        return flat[key]

    def __contains__(self, key: object) -> bool:
        return key in self.to_dict()


# Upstream's rule for accuracy-like names: "acc" or "f1" as a whole word (or "f1_..."), or a word starting with
# accuracy / precision / recall. As in upstream, "_" is a word character, so "accuracy_reply" matches and
# "tool_accuracy" does not: name metrics with the measure first, or list them in core_metrics.
_ACCURACY_LIKE = re.compile(r"\b(?:acc\b|f1\b|f1_|accuracy|precision|recall)")


class MetricConfig:
    """Which reward metrics are core (shown first, under `tensorboard_prefix`) and which may be sparse."""

    def __init__(
        self,
        core_metrics: list | None = None,
        sparse_metrics: list | None = None,
        tensorboard_prefix: str = "val-aux",
        auto_detect_accuracy: bool = True,
    ) -> None:
        self.core_metrics = list(core_metrics or [])
        self.sparse_metrics = list(sparse_metrics or [])
        self.tensorboard_prefix = tensorboard_prefix
        self.auto_detect_accuracy = auto_detect_accuracy

    def is_core_metric(self, metric_name: str) -> bool:
        """Listed in `core_metrics`, or (with `auto_detect_accuracy`) named like an accuracy/precision/recall/F1."""
        if metric_name in self.core_metrics:
            return True
        return self.auto_detect_accuracy and _ACCURACY_LIKE.search(metric_name.lower()) is not None

    def is_sparse_metric(self, metric_name: str) -> bool:
        """Whether samples may omit this metric."""
        return metric_name in self.sparse_metrics

    def __repr__(self) -> str:
        return (
            f"MetricConfig(core_metrics={self.core_metrics!r}, sparse_metrics={self.sparse_metrics!r}, "
            f"tensorboard_prefix={self.tensorboard_prefix!r}, auto_detect_accuracy={self.auto_detect_accuracy!r})"
        )


__all__ = ["RewardResult", "MetricConfig"]
