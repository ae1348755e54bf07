"""actor_rollout_ref.rollout.cudagraph_capture_sizes (upstream's key, default null): vLLM's
compilation_config.cudagraph_capture_sizes on a CUDA device; the hf rollout's static-cache row counts; refused where
no CUDA graph is captured."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_model import tiny_llama
from tests.workers.rollout.test_hf_rollout import rollout_config
from tests.workers.rollout.test_hf_static_cache import _prompts, _same
from tests.workers.rollout.test_vllm_parts import SMOL, cfg
from verl.workers.rollout import HFRollout
from verl.workers.rollout.hf_static import StaticCacheDecoder
from verl.workers.rollout.vllm import engine as engine_mod

KEY = "actor_rollout_ref.rollout.cudagraph_capture_sizes"


def test_vllm_gets_the_sizes_in_its_compilation_config(monkeypatch):
    monkeypatch.setattr(engine_mod, "get_device_name", lambda: "cuda")
    kw = engine_mod.engine_kwargs(cfg(enforce_eager=False, cudagraph_capture_sizes=[8, 1, 4]), "/m", SMOL, 0, 1)
    assert kw["compilation_config"] == {"cudagraph_capture_sizes": [1, 4, 8]} and kw["enforce_eager"] is False
    # merged with the user's own compilation_config; the same key given twice, differently, is refused
    kw = engine_mod.engine_kwargs(cfg(enforce_eager=False, cudagraph_capture_sizes=[2],
                                      **{"engine_kwargs.vllm.compilation_config": {"mode": 0}}), "/m", SMOL, 0, 1)
    assert kw["compilation_config"] == {"mode": 0, "cudagraph_capture_sizes": [2]}
    with pytest.raises(ValueError, match="are the same setting"):
        engine_mod.engine_kwargs(cfg(enforce_eager=False, cudagraph_capture_sizes=[2], **{
            "engine_kwargs.vllm.compilation_config": {"cudagraph_capture_sizes": [4]}}), "/m", SMOL, 0, 1)
    # null (upstream's default): vLLM chooses
    assert "compilation_config" not in engine_mod.engine_kwargs(cfg(enforce_eager=False), "/m", SMOL, 0, 1)


def test_vllm_on_cpu_refuses_the_sizes(monkeypatch):
    monkeypatch.setattr(engine_mod, "get_device_name", lambda: "cpu")
    monkeypatch.setattr(engine_mod, "cpu_kv_cache_bytes", lambda *a: 1 << 20)
    with pytest.raises(ValueError, match=f"{KEY}=\\[2\\]: CUDA graphs need a CUDA device"):
        engine_mod.engine_kwargs(cfg(enforce_eager=False, cudagraph_capture_sizes=[2], dtype="fp32"), "/m", SMOL, 0, 1)


def test_hf_static_decoder_pads_rows_to_the_capture_sizes():
    model = tiny_llama(attn_implementation="sdpa")
    decoder = StaticCacheDecoder(model, torch.device("cpu"), compile=False, capture_sizes=[6, 3])
    assert [decoder.padded_rows(n) for n in (1, 3, 4, 6, 7)] == [3, 3, 6, 6, 8]  # above 6: a power of two
    assert StaticCacheDecoder(model, torch.device("cpu"), compile=False).padded_rows(3) == 4  # without: 2^k

    config = rollout_config(calculate_log_probs=True, enforce_eager=False, cudagraph_capture_sizes=[6])
    eager = HFRollout(model, rollout_config(calculate_log_probs=True), static_cache=False)
    static = HFRollout(model, config, static_cache=True)  # forced on: this CPU captures no graph
    out = static.generate_sequences(_prompts([6, 3, 5, 1]))
    assert static.static_cache_off is None and static._decoder.rows == 6  # 4 rows padded to 6, not 4
    _same(out, eager.generate_sequences(_prompts([6, 3, 5, 1])))  # the padding rows never reach the output


def test_hf_without_cuda_graphs_refuses_the_sizes():
    model = tiny_llama(attn_implementation="sdpa")
    with pytest.raises(ValueError, match="no CUDA device computes"):
        HFRollout(model, rollout_config(enforce_eager=False, cudagraph_capture_sizes=[4]))  # CPU here
    with pytest.raises(ValueError, match="enforce_eager is true"):
        HFRollout(model, rollout_config(enforce_eager=True, cudagraph_capture_sizes=[4]))
