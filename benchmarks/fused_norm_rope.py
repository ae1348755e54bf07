"""Fused RMSNorm / rotary embedding (verl/models/fused_norm_rope.py) against transformers' own, at the default
model's shapes, forward + backward, both measured in this run:

    .venv/bin/python benchmarks/fused_norm_rope.py            # a 1100-token packed micro-batch, fp32
    .venv/bin/python benchmarks/fused_norm_rope.py --dtype bf16

Prints `name: value` lines: the milliseconds of each and `rms_norm_speedup` / `rope_speedup` (HF time / fused time;
best of --repeats rounds, the two alternating so drift hits both). The whole actor update's figure comes from
`VERL_FUSED_NORM_ROPE=0 benchmarks/throughput.py` against the default.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _best_ms(fn, rounds: int, calls: int = 20) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=int, default=1100)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()

    import torch
    from transformers import AutoConfig
    from transformers.models.llama import modeling_llama

    from verl.models.fused_norm_rope import _reference, fused_apply_rotary_pos_emb, fused_rms_norm
    from verl.utils.default_model import default_model_path

    config = AutoConfig.from_pretrained(default_model_path())
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    hidden, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
    head_dim = hidden // heads
    gen = torch.Generator().manual_seed(0)
    print(f"shapes: {args.tokens} tokens, hidden {hidden}, heads {heads}/{kv_heads} x {head_dim}, {args.dtype}")

    norm = modeling_llama.LlamaRMSNorm(hidden, eps=config.rms_norm_eps).to(dtype)
    x = torch.randn(1, args.tokens, hidden, generator=gen).to(dtype).requires_grad_()
    grad = torch.randn(1, args.tokens, hidden, generator=gen).to(dtype)
    hf_norm = lambda: modeling_llama.LlamaRMSNorm.forward(norm, x).backward(grad)  # noqa: E731
    fused_norm = lambda: fused_rms_norm(norm, x).backward(grad)  # noqa: E731

    # (batch, heads, tokens, head_dim) views of (batch, tokens, heads, head_dim) projections, as the attention has
    q = torch.randn(1, args.tokens, heads, head_dim, generator=gen).to(dtype).transpose(1, 2).requires_grad_()
    k = torch.randn(1, args.tokens, kv_heads, head_dim, generator=gen).to(dtype).transpose(1, 2).requires_grad_()
    angles = torch.randn(1, args.tokens, head_dim, generator=gen)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    grads = (torch.randn(q.shape, generator=gen).to(dtype), torch.randn(k.shape, generator=gen).to(dtype))
    hf_apply = _reference("apply_rotary_pos_emb")
    hf_rope = lambda: torch.autograd.backward(hf_apply(q, k, cos, sin), grads)  # noqa: E731
    fused_rope = lambda: torch.autograd.backward(fused_apply_rotary_pos_emb(q, k, cos, sin), grads)  # noqa: E731

    cases = {"rms_norm_hf": hf_norm, "rms_norm_fused": fused_norm, "rope_hf": hf_rope, "rope_fused": fused_rope}
    for fn in cases.values():
        fn()  # warm-up: kernels and the heap
    results = dict.fromkeys(cases, float("inf"))
    for _ in range(args.repeats):
        for name, fn in cases.items():
            results[name] = min(results[name], _best_ms(fn, 1))
    for name, ms in results.items():
        print(f"{name}_ms: {ms:.3f}")
    print(f"rms_norm_speedup: {results['rms_norm_hf'] / results['rms_norm_fused']:.2f}")
    print(f"rope_speedup: {results['rope_hf'] / results['rope_fused']:.2f}")
    layers = config.num_hidden_layers
    saved = (2 * layers + 1) * (results["rms_norm_hf"] - results["rms_norm_fused"]) \
        + layers * (results["rope_hf"] - results["rope_fused"])
    print(f"saved_per_micro_batch_ms: {saved:.1f} ({2 * layers + 1} norms and {layers} rotary embeddings)")


if __name__ == "__main__":
    main()
