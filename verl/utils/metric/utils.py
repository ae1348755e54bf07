"""Collect per-micro-batch metric values in lists and reduce them to one number per name.

A plain list is averaged. A ``Metric`` carries its own aggregation (mean, sum, min, max) and optional weights, so a
worker can say "sum these token counts" or "weight this mean by samples" and the driver reduces it correctly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

import numpy as np
import torch

__all__ = ["AggregationType", "Metric", "append_to_dict", "reduce_metrics"]


class AggregationType(Enum):
    MEAN = "mean"
    SUM = "sum"
    MIN = "min"
    MAX = "max"


def _as_number(value: Any) -> float | int:
    if isinstance(value, torch.Tensor | np.ndarray):
        size = value.numel() if isinstance(value, torch.Tensor) else value.size
        if size == 1:
            return value.item()
        raise ValueError(f"a metric value must be a scalar, got a tensor of shape {tuple(value.shape)}")
    if isinstance(value, bool | int | float | np.integer | np.floating):
        return value.item() if isinstance(value, np.generic) else value
    raise ValueError(f"a metric value must be a number or a scalar tensor, got {type(value).__name__}")


def _as_list(value: Any) -> list:
    return list(value) if isinstance(value, list | tuple | np.ndarray) else [value]


class Metric:
    """Values of one metric with how to reduce them: ``Metric("sum", value=[3, 4])``.

    Every value has a weight (1.0 unless given): MEAN is the weighted mean, SUM the weighted sum; MIN and MAX ignore
    weights. ``aggregate_dp`` reduces one Metric per data-parallel rank.
    """

    def __init__(self, aggregation: str | AggregationType, value: Any = None, weight: Any = None) -> None:
        try:
            self.aggregation = AggregationType(aggregation)
        except ValueError:
            raise ValueError(
                f"unknown metric aggregation {aggregation!r}; use one of {[a.value for a in AggregationType]}"
            ) from None
        self.values: list = []
        self.weights: list[float] = []
        if value is not None:
            self.extend(_as_list(value), weights=weight)

    def _check_same(self, other: Metric) -> None:
        if other.aggregation != self.aggregation:
            raise ValueError(
                f"cannot combine a {other.aggregation.value} metric into a {self.aggregation.value} metric"
            )

    def append(self, value: Any, weight: float = 1.0) -> None:
        """One value (a number or scalar tensor), or every value of another Metric with its weights."""
        if isinstance(value, Metric):
            self.extend(value)
            return
        self.values.append(_as_number(value))
        self.weights.append(float(weight))

    def extend(self, values: Metric | Sequence[Any], weights: Any = None) -> None:
        """Several values; ``weights`` is one weight for all or one per value."""
        if isinstance(values, Metric):
            self._check_same(values)
            values, weights = values.values, values.weights
        values = list(values)
        if weights is None:
            weights = [1.0] * len(values)
        elif not isinstance(weights, list | tuple | np.ndarray):
            weights = [weights] * len(values)
        if len(weights) != len(values):
            raise ValueError(f"{len(values)} metric values but {len(weights)} weights; give one weight per value")
        for value, weight in zip(values, weights, strict=True):
            self.append(value, weight=weight)

    def aggregate(self) -> float:
        values = np.asarray(self.values, dtype=np.float64)
        weights = np.asarray(self.weights, dtype=np.float64)
        if self.aggregation is AggregationType.MIN:
            return float(np.min(values))
        if self.aggregation is AggregationType.MAX:
            return float(np.max(values))
        if self.aggregation is AggregationType.SUM:
            return float(np.sum(values * weights))
        if np.all(weights == 1.0):
            return float(np.mean(values))
        return float(np.sum(values * weights) / np.sum(weights))

    @classmethod
    def aggregate_dp(cls, metrics: Sequence[Metric], weights: Sequence[float] | None = None) -> float:
        """One value from one Metric per data-parallel rank.

        MIN / MAX: over every value of every rank. MEAN / SUM: the ranks are averaged position by position
        (weighted by ``weights``, one per rank, e.g. samples per rank), then those positions are averaged or summed.
        Every rank must hold the same number of values.
        """
        first = metrics[0]
        for other in metrics[1:]:
            first._check_same(other)
        if first.aggregation in (AggregationType.MIN, AggregationType.MAX):
            merged = cls(first.aggregation, value=[v for m in metrics for v in m.values])
            return merged.aggregate()
        lengths = {len(m.values) for m in metrics}
        if len(lengths) != 1:
            raise ValueError(f"aggregate_dp: ranks hold different numbers of values {sorted(lengths)}; they must match")
        if weights is not None and len(weights) != len(metrics):
            raise ValueError(f"aggregate_dp: {len(metrics)} ranks but {len(weights)} weights; give one per rank")
        table = np.asarray([m.values for m in metrics], dtype=np.float64)
        per_position = np.average(table, axis=0, weights=None if weights is None else np.asarray(weights, float))
        return float(np.sum(per_position) if first.aggregation is AggregationType.SUM else np.mean(per_position))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], aggregation: str | AggregationType) -> dict[str, Metric]:
        return {key: cls(aggregation, value=value) for key, value in data.items()}

    def init_list(self) -> Metric:
        """An empty Metric with the same aggregation."""
        return Metric(self.aggregation)

    def __repr__(self) -> str:
        return f"Metric({self.aggregation.value!r}, values={self.values})"


def append_to_dict(data: dict[str, list], new_data: Mapping[str, Any]) -> None:
    """Append each value of ``new_data`` to the list under its key in ``data`` (created when missing)."""
    for key, value in new_data.items():
        data.setdefault(key, []).append(value)


def _flat_values(values: Any) -> list[float]:
    if isinstance(values, (list, tuple, np.ndarray)):
        return [v for item in values for v in _flat_values(item)]
    return [float(values)]


def reduce_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Mean of each metric's values: {name: [v1, v2, ...]} -> {name: mean}; a scalar is kept as is.

    Nested lists (one list per rank, as ``DataProto.concat`` gathers them) are averaged over all their values.
    A ``Metric`` is reduced by its own aggregation; a list of Metrics (one per rank) by ``Metric.aggregate_dp``.
    A name with no values gives NaN, as upstream (a gap in the logged curve rather than a made-up 0).
    """
    out: dict[str, float] = {}
    for key, values in metrics.items():
        if isinstance(values, Metric):
            out[key] = values.aggregate()
            continue
        if isinstance(values, list) and values and all(isinstance(v, Metric) for v in values):
            out[key] = Metric.aggregate_dp(values)  # one Metric per rank, as DataProto.concat gathers them
            continue
        flat = _flat_values(values)
        out[key] = float(np.mean(flat)) if flat else float("nan")
    return out
