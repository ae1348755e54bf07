"""actor_rollout_ref.rollout.enable_prefix_caching (upstream's key, default true) reaches vllm.LLM."""

from __future__ import annotations

from tests.workers.rollout.test_vllm_parts import SMOL, cfg
from verl.workers.rollout.vllm import engine as engine_mod


def test_enable_prefix_caching_reaches_the_engine():
    assert engine_mod.engine_kwargs(cfg(dtype="fp32"), "/m", SMOL, 0, 1)["enable_prefix_caching"] is True
    assert engine_mod.engine_kwargs(cfg(dtype="fp32", enable_prefix_caching=False), "/m", SMOL, 0, 1)[
        "enable_prefix_caching"] is False
