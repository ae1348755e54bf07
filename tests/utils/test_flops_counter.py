"""FLOPs of the tiny Llama by hand, the measured matmul peak, MFU and peak memory figures."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_model import tiny_llama, tiny_llama_config
from verl.models.value_head import build_value_model
from verl.utils import flops_counter
from verl.utils.flops_counter import FlopsCounter, measure_matmul_peak, mfu, non_embedding_params
from verl.utils.memory_stats import peak_memory_metrics, peak_rss_gb, reset_peak_rss

# tiny Llama: hidden 32, intermediate 64, 2 layers, 4 heads x head_dim 8, vocab 128, tied embeddings.
# per layer: q, k, v, o 4 x 32*32 = 4096; gate, up, down 3 x 32*64 = 6144; two RMSNorms 2 x 32 = 64 -> 10304
# two layers + the final norm: 2 * 10304 + 32 = 20640.  LM head (tied to the embedding): 128 * 32 = 4096.
TINY_N = 20640
TINY_HEAD = 4096


def test_non_embedding_params_by_hand():
    assert non_embedding_params(tiny_llama()) == (TINY_N, TINY_HEAD)
    untied = tiny_llama(tie_word_embeddings=False)
    assert non_embedding_params(untied) == (TINY_N, TINY_HEAD)  # the separate head is still charged per logit
    # the critic: no LM head; its score head (32 weights + 1 bias) is an ordinary weight
    critic = build_value_model(tiny_llama_config())
    assert non_embedding_params(critic) == (TINY_N + 33, 0)


def test_training_flops_by_hand():
    counter = FlopsCounter(tiny_llama())
    # two sequences of 3 and 5 real tokens, logits at 2 positions:
    #   6 * 20640 * 8 = 990720;  6 * 4096 * 2 = 49152;  attention 6 * 2 layers * 32 * (9 + 25) = 13056
    assert counter.training_flops([3, 5], logit_positions=2) == 990720 + 49152 + 13056
    assert counter.forward_flops([3, 5], logit_positions=2) == pytest.approx((990720 + 49152 + 13056) / 3)
    assert counter.training_flops([], 0) == 0


def test_mfu_by_hand():
    assert mfu(4e9, 2.0, 4e9) == 0.5  # 2 GFLOP/s achieved on a 4 GFLOP/s peak
    assert mfu(1.0, 0.0, 4e9) == 0.0


def test_matmul_peak_is_measured_once(monkeypatch):
    calls = []
    real = torch.matmul

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(flops_counter, "_PEAK_CACHE", {})
    monkeypatch.setattr(flops_counter, "_EMULATED_FLOPS", 0.0)  # any rate counts as native
    monkeypatch.setattr(torch, "matmul", counting)
    first = measure_matmul_peak("cpu", torch.float32, size=64, repeats=3)
    assert len(calls) == 5  # the probe, one warm-up and three timed
    assert measure_matmul_peak("cpu", torch.float32, size=64, repeats=3) == first
    assert len(calls) == 5  # cached
    assert 1e6 < first < 1e14  # a plausible FLOP/s figure for any CPU
    measure_matmul_peak("cpu", torch.float32, size=64, repeats=3, fresh=True)
    assert len(calls) == 10  # measured again


def test_an_emulated_dtype_is_measured_by_the_probe_alone(monkeypatch):
    shapes = []
    real = torch.matmul

    def recording(a, b, **kwargs):
        shapes.append(tuple(a.shape))
        return real(a, b, **kwargs)

    monkeypatch.setattr(flops_counter, "_PEAK_CACHE", {})
    monkeypatch.setattr(flops_counter, "_EMULATED_FLOPS", float("inf"))  # every rate looks emulated
    monkeypatch.setattr(torch, "matmul", recording)
    rate = measure_matmul_peak("cpu", torch.bfloat16, size=2048, repeats=5)
    assert shapes == [(512, 512)] and 0 < rate < 1e14  # no 2048-size matmul: minutes where bf16 is emulated


def test_peak_memory_metrics():
    metrics = peak_memory_metrics()
    assert 0.01 < metrics["perf/cpu_rss_peak_gb"] < 1024  # torch alone holds tens of MB


@pytest.mark.skipif(not reset_peak_rss(), reason="needs Linux /proc/self/clear_refs")
def test_peak_rss_grows_with_a_touched_block_and_resets():
    reset_peak_rss()
    before = peak_rss_gb()
    block = torch.ones(64 << 20, dtype=torch.uint8)  # 64 MiB, every page written
    grown = peak_rss_gb()
    del block
    reset_peak_rss()
    assert grown - before > 0.05  # at least ~54 MB of the 64 MiB shows up
    assert peak_rss_gb() < grown
