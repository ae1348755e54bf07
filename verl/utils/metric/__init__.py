"""Metric collection and reduction; upstream's ``verl.utils.metric`` (the code lives in ``verl.utils.metric.utils``)."""

from verl.utils.metric.utils import AggregationType, Metric, append_to_dict, reduce_metrics

__all__ = ["AggregationType", "Metric", "append_to_dict", "reduce_metrics"]
