"""FlopsCounter(config) with upstream's signature: estimate_flops(batch_seqlens, delta_time) -> (achieved TFLOP/s,
the device's datasheet TFLOP/s), counted as upstream counts (verl.utils.flops_formulas); callers passing a model
keep working."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from tests.helpers.tiny_model import tiny_llama, tiny_llama_config
from verl.utils.flops_counter import _DEVICE_FLOPS, FlopsCounter, get_device_flops

SEQLENS = [512, 1024, 2048]


def _tiny_flops(kv_heads: int) -> int:
    """tiny Llama: vocab 128, hidden 32, intermediate 64, 2 layers, 4 heads x head_dim 8; seqlens 3 and 5."""
    attn = 32 * (4 * 8 + kv_heads * 8 + kv_heads * 8 + 4 * 8)  # q, k, v, o
    mlp = 3 * 32 * 64  # gate, up, down
    dense = 2 * (attn + mlp) + 2 * 128 * 32  # layers + embedding + LM head
    return 6 * dense * (3 + 5) + 12 * (3 * 3 + 5 * 5) * 2 * (4 * 8)


def test_tiny_llama_by_hand():
    # 4 kv heads: per layer 4096 + 6144; dense 2 * 10240 + 8192 = 28672; 6 * 28672 * 8 + 12 * 34 * 2 * 32
    assert _tiny_flops(4) == 1_376_256 + 26_112
    achieved, promised = FlopsCounter(tiny_llama_config()).estimate_flops([3, 5], 2.0)
    assert math.isclose(achieved, 1_402_368 / 2.0 / 1e12)
    assert promised == get_device_flops()
    gqa, _ = FlopsCounter(tiny_llama_config(num_key_value_heads=2)).estimate_flops([3, 5], 1.0)
    assert math.isclose(gqa, _tiny_flops(2) / 1e12)


def test_a_model_gives_the_same_estimate_and_keeps_its_own_counting():
    from_model = FlopsCounter(tiny_llama())
    from_config = FlopsCounter(tiny_llama_config())
    assert from_model.estimate_flops([3, 5], 1.0) == from_config.estimate_flops([3, 5], 1.0)
    # training_flops: a model's own weights (norms included; tests/utils/test_flops_counter.py by hand), a config's
    # projection weights (no norms); the LM head per logit position in both
    assert from_model.training_flops([3, 5], 2) == 990720 + 49152 + 13056
    assert from_config.params == 2 * (4096 + 6144) and from_config.head_params == 128 * 32
    assert from_config.training_flops([3, 5], 2) == 6 * 20480 * 8 + 49152 + 13056


def test_llama2_7b_as_upstream_counts_it():
    config = SimpleNamespace(model_type="llama", vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                             num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32)
    dense = 32000 * 4096 * 2 + 32 * (4096 * 4096 * 4 + 4096 * 11008 * 3)
    expected = 6 * dense * sum(SEQLENS) + 12 * sum(n * n for n in SEQLENS) * 32 * 4096
    achieved, _ = FlopsCounter(config).estimate_flops(SEQLENS, 1)
    assert math.isclose(achieved, expected / 1e12)


def _cfg(**kw):
    return SimpleNamespace(**kw)


# published configs; totals for batch [512, 1024, 2048] as upstream's own test states them
PUBLISHED = {
    "qwen3_moe": (_cfg(model_type="qwen3_moe", hidden_size=2048, vocab_size=151936, num_hidden_layers=48,
                       num_key_value_heads=4, num_attention_heads=32, head_dim=128, moe_intermediate_size=768,
                       num_experts_per_tok=8, num_experts=128), 85087060230144),
    "deepseek_v3": (_cfg(model_type="deepseek_v3", hidden_size=7168, vocab_size=129280, moe_intermediate_size=2048,
                         num_hidden_layers=61, first_k_dense_replace=3, num_attention_heads=128, n_routed_experts=256,
                         num_experts_per_tok=8, n_shared_experts=1, kv_lora_rank=512, qk_rope_head_dim=64,
                         v_head_dim=128, intermediate_size=18432, qk_nope_head_dim=128, q_lora_rank=1536),
                    906535995703296),
    "gemma3_text": (_cfg(model_type="gemma3_text", vocab_size=262208, hidden_size=3840, intermediate_size=15360,
                         num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=8, head_dim=256,
                         sliding_window=1024, layer_types=None, sliding_window_pattern=6), 283517065887744),
    "gpt_oss": (_cfg(model_type="gpt_oss", vocab_size=201088, hidden_size=2880, num_hidden_layers=24,
                     num_attention_heads=64, num_key_value_heads=8, head_dim=64, intermediate_size=2880,
                     num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
                     layer_types=["sliding_attention", "full_attention"] * 12), 93539253878784),
    "apertus": (_cfg(model_type="apertus", vocab_size=131072, hidden_size=4096, intermediate_size=21504,
                     num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32), 199154680725504),
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_other_families_match_upstreams_figures(name):
    config, expected = PUBLISHED[name]
    achieved, _ = FlopsCounter(config).estimate_flops(SEQLENS, 1)
    assert math.isclose(achieved, expected / 1e12)


def test_gemma3_sliding_window_by_hand():
    config, _ = PUBLISHED["gemma3_text"]
    counter = FlopsCounter(config)
    # 8 of 48 layers are global (every 6th); the other 40 see at most 1024 keys
    span = 8 * sum(n * n for n in SEQLENS) + 40 * sum(n * min(n, 1024) for n in SEQLENS)
    dense = 262208 * 3840 * 2 + 48 * (3840 * (2 * 16 * 256 + 2 * 8 * 256) + 3 * 3840 * 15360)
    expected = 6 * dense * sum(SEQLENS) + 12 * 16 * 256 * span
    assert math.isclose(counter.estimate_flops(SEQLENS, 1)[0], expected / 1e12)


def test_unknown_model_type_warns_and_reports_zero():
    with pytest.warns(UserWarning, match="no FLOPs formula"):
        counter = FlopsCounter(_cfg(model_type="mamba", hidden_size=8, num_attention_heads=2, num_hidden_layers=1,
                                    vocab_size=10))
    assert counter.estimate_flops([4], 1.0)[0] == 0
    with pytest.raises(ValueError, match="mamba"):
        counter.training_flops([4], 1)


def test_device_flops_table_and_units():
    for name, value in _DEVICE_FLOPS.items():
        assert get_device_flops(unit="B", device_name=name) == value
    assert get_device_flops(unit="T", device_name="NVIDIA H100 80GB HBM3") == 989.0
    assert get_device_flops(unit="T", device_name="NVIDIA L40S") == 362.05
    assert get_device_flops(device_name="some new chip") == float("inf")
    with pytest.raises(ValueError, match="unit"):
        get_device_flops(unit="X")
