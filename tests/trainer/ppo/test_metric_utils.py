"""Data / timing / throughput / validation metrics against hand-computed numbers."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.metric_utils import (
    bootstrap_metric,
    calc_maj_val,
    compute_data_metrics,
    compute_throughout_metrics,
    compute_throughput_metrics,
    compute_timing_metrics,
    marked_timer,
    process_validation_metrics,
    validation_metrics_to_dict,
)
from verl.utils import timer as timer_module

# Two rows, prompt width P=3, response width R=4.
#   row 0: prompt mask [0,1,1] (length 2), response mask [1,1,1,0] (length 3)
#   row 1: prompt mask [1,1,1] (length 3 = P, clipped), response mask [1,1,1,1] (length 4 = R, clipped)
ATTENTION_MASK = torch.tensor([[0, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]])


def _batch(with_values: bool = True) -> DataProto:
    tensors = {
        "attention_mask": ATTENTION_MASK,
        "response_mask": ATTENTION_MASK[:, 3:],
        "responses": torch.tensor([[5, 6, 7, 0], [8, 9, 10, 11]]),
        # sums: row 0 = 1.0, row 1 = 0.5
        "token_level_scores": torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.5]]),
        # sums: row 0 = -0.1 + 1.0 = 0.9, row 1 = -0.2 + 0.5 = 0.3
        "token_level_rewards": torch.tensor([[-0.1, 0.0, 1.0, 0.0], [0.0, -0.2, 0.0, 0.5]]),
        # valid: 1, 2, 3 | -1, -2, -3, -4 (the 99 sits on padding)
        "advantages": torch.tensor([[1.0, 2.0, 3.0, 99.0], [-1.0, -2.0, -3.0, -4.0]]),
        # valid: 1, 1, 1 | 0, 0, 0, 0
        "returns": torch.tensor([[1.0, 1.0, 1.0, 50.0], [0.0, 0.0, 0.0, 0.0]]),
    }
    if with_values:
        # valid: 1, 1, 0 | 0, 0, 0, 1
        tensors["values"] = torch.tensor([[1.0, 1.0, 0.0, 7.0], [0.0, 0.0, 0.0, 1.0]])
    return DataProto.from_dict(tensors)


def test_compute_data_metrics_hand_example():
    m = compute_data_metrics(_batch(), use_critic=True)
    expected = {
        "critic/score/mean": 0.75, "critic/score/max": 1.0, "critic/score/min": 0.5,
        "critic/rewards/mean": 0.6, "critic/rewards/max": 0.9, "critic/rewards/min": 0.3,
        # (1 + 2 + 3 - 1 - 2 - 3 - 4) / 7 = -4/7
        "critic/advantages/mean": -4 / 7, "critic/advantages/max": 3.0, "critic/advantages/min": -4.0,
        "critic/returns/mean": 3 / 7, "critic/returns/max": 1.0, "critic/returns/min": 0.0,
        "critic/values/mean": 3 / 7, "critic/values/max": 1.0, "critic/values/min": 0.0,
        # returns - values on valid tokens: 0, 0, 1, 0, 0, 0, -1 -> mean 0, unbiased var 2/6 = 1/3.
        # returns: mean 3/7, squared deviations 3*(4/7)^2 + 4*(3/7)^2 = 84/49 = 12/7, unbiased var (12/7)/6 = 2/7.
        # explained variance = 1 - (1/3) / (2/7 + 1e-5)
        "critic/vf_explained_var": 1 - (1 / 3) / (2 / 7 + 1e-5),
        "response_length/mean": 3.5, "response_length/max": 4.0, "response_length/min": 3.0,
        "response_length/clip_ratio": 0.5,  # one of two responses fills all R=4 columns
        "prompt_length/mean": 2.5, "prompt_length/max": 3.0, "prompt_length/min": 2.0,
        "prompt_length/clip_ratio": 0.5,
    }
    assert set(m) == set(expected)
    for key, value in expected.items():
        assert m[key] == pytest.approx(value, abs=1e-6), key


def test_compute_data_metrics_without_critic():
    m = compute_data_metrics(_batch(with_values=False), use_critic=False)
    assert not any(k.startswith("critic/values") for k in m)
    assert "critic/vf_explained_var" not in m
    assert m["critic/score/mean"] == pytest.approx(0.75)


def test_compute_data_metrics_names_missing_key():
    batch = _batch()
    batch.pop(batch_keys=["advantages"])
    with pytest.raises(KeyError, match="advantages"):
        compute_data_metrics(batch)


def test_compute_timing_metrics():
    # response tokens 3 + 4 = 7; all tokens 7 + (2 + 3) = 12
    timing_raw = {"gen": 0.7, "update_actor": 1.2, "step": 2.4, "testing": 5.0}
    m = compute_timing_metrics(_batch(), timing_raw)
    assert m == pytest.approx({
        "timing_s/gen": 0.7, "timing_s/update_actor": 1.2, "timing_s/step": 2.4, "timing_s/testing": 5.0,
        "timing_per_token_ms/gen": 700 / 7,  # 100 ms per response token
        "timing_per_token_ms/update_actor": 1200 / 12,
        "timing_per_token_ms/step": 2400 / 12,
    })


def test_compute_throughout_metrics():
    batch = _batch()
    batch.meta_info["global_token_num"] = [10, 14]
    m = compute_throughout_metrics(batch, {"step": 2.4}, n_gpus=2)
    # 24 tokens / (2.4 s * 2 devices) = 5 tokens per second per device
    assert m == pytest.approx({"perf/total_num_tokens": 24, "perf/time_per_step": 2.4, "perf/throughput": 5.0})
    # Without global_token_num the attention mask is counted: 5 + 7 = 12 tokens -> 12 / 2.4 = 5 per s.
    m = compute_throughput_metrics(_batch(), {"step": 2.4}, n_gpus=1)
    assert m["perf/total_num_tokens"] == 12 and m["perf/throughput"] == pytest.approx(5.0)
    assert compute_throughput_metrics is compute_throughout_metrics
    with pytest.raises(KeyError, match="step"):
        compute_throughout_metrics(batch, {"gen": 1.0}, n_gpus=1)


def test_marked_timer_accumulates_and_survives_errors(monkeypatch):
    ticks = iter([0.0, 1.5, 10.0, 10.25, 20.0, 21.0])
    monkeypatch.setattr(timer_module, "time", types.SimpleNamespace(perf_counter=lambda: next(ticks)))
    timing: dict[str, float] = {}
    with marked_timer("gen", timing):
        pass
    with marked_timer("gen", timing, color="red"):
        pass
    assert timing == {"gen": pytest.approx(1.75)}
    with pytest.raises(RuntimeError):
        with marked_timer("update_actor", timing):
            raise RuntimeError("boom")
    assert timing["update_actor"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------------


def test_calc_maj_val():
    votes = [{"pred": "x", "val": 1}, {"pred": "y", "val": 0}, {"pred": "y", "val": 0}]
    assert calc_maj_val(votes, vote_key="pred", val_key="val") == 0
    assert calc_maj_val(votes[:2], vote_key="pred", val_key="val") == 1  # tie -> first seen


def test_bootstrap_metric_leaves_global_rng_alone():
    np.random.seed(0)
    expected = np.random.rand()
    np.random.seed(0)
    [(mean, std)] = bootstrap_metric([3.0, 3.0, 3.0], subset_size=2, reduce_fns=[np.max])
    assert (mean, std) == (3.0, 0.0)
    assert np.random.rand() == expected


def _validation_example():
    # source "a": prompt p1 has acc [1, 0] (answers x, y); prompt p2 has acc [1, 1] (answers x, x)
    # source "b": prompts q1, q2 with one response each: acc 0.5 and 1.0
    data_sources = ["a", "a", "a", "a", "b", "b"]
    sample_inputs = ["p1", "p2", "p1", "p2", "q1", "q2"]  # interleaved on purpose: grouping is by text
    infos = {"acc": [1.0, 1.0, 0.0, 1.0, 0.5, 1.0], "pred": ["x", "x", "y", "x", "z", "z"]}
    return data_sources, sample_inputs, infos


def test_process_validation_metrics_hand_example():
    result = process_validation_metrics(*_validation_example(), seed=42)
    assert set(result) == {"a", "b"}
    assert set(result["a"]) == {"acc"}  # "pred" holds strings: used for voting, not reported
    a = result["a"]["acc"]
    assert set(a) == {"mean@2", "std@2", "best@2/mean", "best@2/std", "worst@2/mean", "worst@2/std",
                      "maj@2/mean", "maj@2/std"}
    # per prompt then averaged: mean@2 = (0.5 + 1.0) / 2; std@2 = (np.std([1, 0]) = 0.5, 0) / 2
    assert a["mean@2"] == pytest.approx(0.75)
    assert a["std@2"] == pytest.approx(0.25)
    # Two draws with replacement from p1's [1, 0]: P(max = 1) = 3/4, P(min = 1) = 1/4; p2 is always 1.
    # best@2 = (3/4 + 1) / 2 = 0.875, worst@2 = (1/4 + 1) / 2 = 0.625 (bootstrap estimates, 1000 resamples).
    assert a["best@2/mean"] == pytest.approx(0.875, abs=0.03)
    assert a["worst@2/mean"] == pytest.approx(0.625, abs=0.03)
    # std of a Bernoulli(3/4) draw = sqrt(3/16) ~ 0.433 for p1, 0 for p2
    assert a["best@2/std"] == pytest.approx(np.sqrt(3 / 16) / 2, abs=0.02)
    # Majority of two draws of p1 (ties go to the first drawn): xx -> 1, yy -> 0, xy -> 1, yx -> 0: 1/2.
    # maj@2 = (1/2 + 1) / 2 = 0.75
    assert a["maj@2/mean"] == pytest.approx(0.75, abs=0.03)
    # single responses: only mean@1 = (0.5 + 1.0) / 2
    assert result["b"] == {"acc": {"mean@1": pytest.approx(0.75)}}


def test_process_validation_metrics_sample_sizes_and_constant_groups():
    # one prompt, 5 identical rewards: k = 2, 4, then 5; every estimate is exactly the value with zero spread
    result = process_validation_metrics(["s"] * 5, ["p"] * 5, {"reward": [0.3] * 5})
    r = result["s"]["reward"]
    assert {k.split("/")[0] for k in r} == {"mean@5", "std@5", "best@2", "best@4", "best@5", "worst@2", "worst@4",
                                            "worst@5"}
    assert all(v == pytest.approx(0.0 if k.endswith("std") or k.startswith("std") else 0.3) for k, v in r.items())


def test_process_validation_metrics_rejects_ragged_inputs():
    with pytest.raises(ValueError, match="acc"):
        process_validation_metrics(["a", "a"], ["p", "p"], {"acc": [1.0]})


def test_validation_metrics_to_dict_core_and_aux():
    data_sources, sample_inputs, infos = _validation_example()
    infos["reward"] = [1.0, 1.0, 0.0, 1.0, 0.5, 1.0]
    flat = validation_metrics_to_dict(process_validation_metrics(data_sources, sample_inputs, infos))
    core = {k for k in flat if k.startswith("val-core/")}
    assert core == {"val-core/a/acc/mean@2", "val-core/a/acc/best@2/mean", "val-core/a/acc/best@2/std",
                    "val-core/a/acc/maj@2/mean", "val-core/a/acc/maj@2/std", "val-core/b/acc/mean@1"}
    assert "val-aux/a/acc/worst@2/mean" in flat and "val-aux/a/reward/mean@2" in flat
    assert flat["val-core/a/acc/mean@2"] == pytest.approx(0.75)


def test_compute_response_info_splits_the_attention_mask():
    from verl.trainer.ppo.metric_utils import _compute_response_info

    attention_mask = torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    batch = DataProto.from_dict(tensors={"responses": torch.zeros(2, 3, dtype=torch.long),
                                         "attention_mask": attention_mask})
    info = _compute_response_info(batch)
    assert torch.equal(info["response_mask"], attention_mask[:, 3:])
    assert info["prompt_length"].tolist() == [2.0, 3.0]
    assert info["response_length"].tolist() == [2.0, 1.0]
    assert info["prompt_length"].dtype == torch.float32
