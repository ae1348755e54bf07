"""The workers' perf/mfu/<role> and memory metrics, from a hand-computed FLOPs figure."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_model import tiny_llama
from verl.protocol import DataProto
from verl.utils.flops_counter import FlopsCounter
from verl.workers.fsdp_workers import ActorRolloutRefWorker


def test_actor_mfu_by_hand():
    worker = ActorRolloutRefWorker.__new__(ActorRolloutRefWorker)  # no Ray: only the metric arithmetic
    worker._flops_counter = FlopsCounter(tiny_llama())
    worker._matmul_peak = 1e6
    # rows of 3 and 5 real tokens, 2 response tokens: 1052928 FLOPs per pass (tests/utils/test_flops_counter.py)
    data = DataProto.from_dict({"attention_mask": torch.tensor([[0, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0]]),
                                "response_mask": torch.tensor([[1, 0], [1, 0]])})
    metrics = worker._perf_metrics("actor", data, seconds=2.0, epochs=2)
    assert metrics["perf/mfu/actor"] == pytest.approx(1052928 * 2 / 2.0 / 1e6)
    assert metrics["perf/matmul_peak_tflops/actor"] == 1e-6
    assert metrics["perf/cpu_rss_peak_gb"] > 0
    # the critic has no logits: its FLOPs drop the 6 * 4096 * 2 LM-head term
    critic = worker._perf_metrics("critic", data, seconds=1.0, epochs=1)
    assert critic["perf/mfu/critic"] == pytest.approx((1052928 - 49152) / 1e6)
