"""Named metric series with a per-name aggregation: upstream's ``verl.utils.metric.metric`` (``Metrics``).

``Metrics`` keeps every value logged under a name (``metrics.add("actor/loss", loss)``) and a ``MetricConfig``
per name that says how the series reduces to one number (mean, sum, min, max, std, median) and how it prints.
A name without a config gets one inferred from its words: ``sum`` -> sum, ``max``/``peak`` -> max,
``min``/``lowest`` -> min, else mean; learning rates (``lr``, ``learning_rate``) print with six decimals.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np
import torch


class MetricAggregationType(str, Enum):
    MEAN = "mean"
    SUM = "sum"
    MIN = "min"
    MAX = "max"
    STD = "std"
    MEDIAN = "median"


@dataclass
class MetricConfig:
    name: str
    aggregation: MetricAggregationType = MetricAggregationType.MEAN
    format_str: str = "{:.3f}"


_REDUCERS = {
    MetricAggregationType.MEAN: np.mean,
    MetricAggregationType.SUM: np.sum,
    MetricAggregationType.MIN: np.min,
    MetricAggregationType.MAX: np.max,
    MetricAggregationType.STD: np.std,
    MetricAggregationType.MEDIAN: np.median,
}
_AGGREGATION_WORDS = (
    (MetricAggregationType.SUM, ("sum",)),
    (MetricAggregationType.MAX, ("max", "peak")),
    (MetricAggregationType.MIN, ("min", "lowest")),
)


def _scalar(name: str, value: Any) -> Any:
    """A Python number from a number, a one-element tensor or a 0-d/one-element array."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"metric {name!r} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        return value.detach().item()
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise ValueError(f"metric {name!r} must be a scalar, got an array of shape {value.shape}")
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _not_found(name: str) -> KeyError:
    return KeyError(f"Metric {name} not found")


class Metrics:
    """Series of values by metric name, each with the MetricConfig that reduces and formats it."""

    def __init__(self) -> None:
        self.data: dict[str, list[Any]] = {}
        self.configs: dict[str, MetricConfig] = {}

    @staticmethod
    def _auto_infer_config(name: str) -> MetricConfig:
        lowered = name.lower()
        aggregation = MetricAggregationType.MEAN
        for candidate, words in _AGGREGATION_WORDS:
            if any(word in lowered for word in words):
                aggregation = candidate
                break
        is_lr = "lr" in lowered or "learning_rate" in lowered
        return MetricConfig(name, aggregation, "{:.6f}" if is_lr else "{:.3f}")

    def add(self, name: str, value: Any, config: MetricConfig | None = None) -> None:
        """Append one value to `name`'s series; `config` (if given) replaces the name's config."""
        self.data.setdefault(name, []).append(_scalar(name, value))
        if config is not None:
            self.configs[name] = config
        elif name not in self.configs:
            self.configs[name] = self._auto_infer_config(name)

    @classmethod
    def from_dict(cls, data: dict[str, Any], configs: dict[str, MetricConfig] | None = None) -> Metrics:
        """A value or a list/tuple of values per name; the input is copied, never aliased."""
        metrics = cls()
        for name, values in copy.deepcopy(data).items():
            config = (configs or {}).get(name)
            for value in values if isinstance(values, (list, tuple)) else [values]:
                metrics.add(name, value, config)
        return metrics

    @classmethod
    def _coerce(cls, other: Metrics | dict[str, Any]) -> Metrics:
        if isinstance(other, Metrics):
            return other
        if isinstance(other, dict):
            return cls.from_dict(other)
        raise TypeError(f"Expected Metrics or dict, got {type(other).__name__}")

    def merge(self, other: Metrics | dict[str, Any], strict_config: bool = False) -> Metrics:
        """Extend each series with `other`'s values; a name new here takes `other`'s config."""
        other = self._coerce(other)
        for name, values in other.data.items():
            theirs = other.configs.get(name)
            ours = self.configs.get(name)
            if strict_config and ours is not None and theirs is not None and ours != theirs:
                raise ValueError(f"Config for metric {name} is different: {ours} here, {theirs} in the other")
            self.data.setdefault(name, []).extend(values)
            if ours is None:
                self.configs[name] = theirs or self._auto_infer_config(name)
        return self

    def update(self, other: Metrics | dict[str, Any]) -> Metrics:
        """Replace each series (and its config) that `other` has; other names are kept."""
        other = self._coerce(other)
        for name, values in other.data.items():
            self.data[name] = list(values)
            self.configs[name] = other.configs.get(name) or self._auto_infer_config(name)
        return self

    @staticmethod
    def _aggregate_value(values: list[Any], aggregation: MetricAggregationType) -> float:
        return float(_REDUCERS[MetricAggregationType(aggregation)](np.asarray(values, dtype=np.float64)))

    def get_aggregated_value(self, name: str, formatted_str: bool = False) -> float | str:
        if name not in self.data:
            raise _not_found(name)
        config = self.configs.get(name) or self._auto_infer_config(name)
        value = self._aggregate_value(self.data[name], config.aggregation)
        return config.format_str.format(value) if formatted_str else value

    def get_raw_value(self, name: str) -> list[Any]:
        if name not in self.data:
            raise _not_found(name)
        return self.data[name]

    def __getitem__(self, name: str) -> list[Any]:
        return self.get_raw_value(name)

    def __setitem__(self, name: str, value: Any) -> None:
        self.add(name, value)

    def __contains__(self, name: object) -> bool:
        return name in self.data

    def __len__(self) -> int:
        return len(self.data)
