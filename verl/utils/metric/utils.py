"""Collect per-micro-batch metric values in lists and reduce them to one number per name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["append_to_dict", "reduce_metrics"]


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
    A name with no values gives NaN, as upstream (a gap in the logged curve rather than a made-up 0).
    """
    out: dict[str, float] = {}
    for key, values in metrics.items():
        flat = _flat_values(values)
        out[key] = float(np.mean(flat)) if flat else float("nan")
    return out
