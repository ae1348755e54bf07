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


def reduce_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """Mean of each metric's list (a scalar is kept as is): {name: [v1, v2, ...]} -> {name: mean}.

    An empty list is an error, not a silent 0: it means a stage logged a name without values.
    """
    out: dict[str, float] = {}
    for key, values in metrics.items():
        if isinstance(values, (list, tuple, np.ndarray)):
            if len(values) == 0:
                raise ValueError(f"reduce_metrics: metric {key!r} has no values")
            out[key] = float(np.mean([float(v) for v in values]))
        else:
            out[key] = float(values)
    return out
