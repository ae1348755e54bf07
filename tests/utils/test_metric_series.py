"""verl.utils.metric.metric.Metrics: series by name, reduced by the name's MetricConfig (hand-computed cases)."""

import numpy as np
import pytest
import torch

from verl.utils.metric.metric import MetricAggregationType as Agg
from verl.utils.metric.metric import MetricConfig, Metrics


def test_values_of_every_kind_become_python_numbers_and_reduce_by_mean():
    metrics = Metrics()
    for value in (2, 4.0, np.array(6.0), torch.tensor(8.0, requires_grad=True), np.float32(10.0)):
        metrics.add("reward", value)
    assert metrics["reward"] == [2, 4.0, 6.0, 8.0, 10.0]
    assert metrics.get_aggregated_value("reward") == 6.0  # (2 + 4 + 6 + 8 + 10) / 5
    assert metrics.get_aggregated_value("reward", formatted_str=True) == "6.000"


def test_a_tensor_with_more_than_one_value_is_refused_with_its_name():
    with pytest.raises(ValueError, match="'bad' must be a scalar"):
        Metrics().add("bad", torch.ones(2))


@pytest.mark.parametrize(
    "name, aggregation, fmt",
    [
        ("tokens_sum", Agg.SUM, "{:.3f}"),
        ("grad/peak", Agg.MAX, "{:.3f}"),
        ("lowest_reward", Agg.MIN, "{:.3f}"),
        ("actor/lr", Agg.MEAN, "{:.6f}"),
        ("score", Agg.MEAN, "{:.3f}"),
    ],
)
def test_config_is_inferred_from_the_words_of_the_name(name, aggregation, fmt):
    assert Metrics._auto_infer_config(name) == MetricConfig(name, aggregation, fmt)


def test_each_aggregation_on_one_series():
    values = [3.0, 1.0, 2.0, 6.0]
    expected = {Agg.MEAN: 3.0, Agg.SUM: 12.0, Agg.MIN: 1.0, Agg.MAX: 6.0, Agg.MEDIAN: 2.5, Agg.STD: np.sqrt(3.5)}
    for aggregation, value in expected.items():
        assert Metrics._aggregate_value(values, aggregation) == pytest.approx(value)


def test_merge_extends_update_replaces_and_configs_stay():
    left = Metrics.from_dict({"loss": [1.0, 3.0]}, {"loss": MetricConfig("loss", Agg.MAX)})
    left.merge({"loss": 5.0, "acc": 0.5})
    assert left["loss"] == [1.0, 3.0, 5.0] and left.get_aggregated_value("loss") == 5.0
    left.update({"loss": [2.0]})
    assert left["loss"] == [2.0] and left["acc"] == [0.5]


def test_strict_merge_refuses_a_different_config_and_other_types_are_refused():
    left, right = Metrics(), Metrics()
    left.add("x", 1.0, MetricConfig("x", Agg.MEAN))
    right.add("x", 2.0, MetricConfig("x", Agg.SUM))
    with pytest.raises(ValueError, match="Config for metric x is different"):
        left.merge(right, strict_config=True)
    with pytest.raises(TypeError, match="Expected Metrics or dict"):
        left.merge([1.0])


def test_from_dict_copies_its_input_and_missing_names_raise_keyerror():
    source = {"m": [1.0]}
    metrics = Metrics.from_dict(source)
    source["m"].append(2.0)
    assert metrics["m"] == [1.0] and len(metrics) == 1 and "m" in metrics
    with pytest.raises(KeyError, match="Metric nope not found"):
        metrics.get_aggregated_value("nope")
