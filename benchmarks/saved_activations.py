"""Bytes the forward keeps for the backward on the default model, without checkpointing and under selective
checkpointing by the recompute functions (the CPU default), counted exactly:

    .venv/bin/python benchmarks/saved_activations.py [--rows 8] [--tokens 304]

One bf16 forward of SmolLM2-135M (fused norms and rotary, as loaded for training) on one packed row of --rows
segments of --tokens tokens; every tensor autograd saves is seen through torch.autograd.graph.saved_tensors_hooks,
and the distinct storages that are not weights are summed. Full recompute and torch's selective mode keep their
activations through their own hooks, so they are not counted here: full keeps each layer's input (layers x tokens x
hidden x 2 bytes, printed) plus one layer's activations while it recomputes; their peak RSS is throughput.py's.

Prints `off_mib`, `selective_mib`, the LM head's share (the same under every policy), and `selective_over_off` of
the decoder layers' bytes last.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

_MIB = 1024**2


def _saved_bytes(model, ids, position_ids, cu_seqlens, upto_layers: bool) -> int:
    import torch

    from verl.models.varlen_attention import packed_forward

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    kwargs = dict(input_ids=ids, position_ids=position_ids, cu_seq_lens_q=cu_seqlens, cu_seq_lens_k=cu_seqlens,
                  max_length_q=int((cu_seqlens[1:] - cu_seqlens[:-1]).max()),
                  max_length_k=int((cu_seqlens[1:] - cu_seqlens[:-1]).max()))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), packed_forward():
        hidden = model.model(**kwargs).last_hidden_state
        if not upto_layers:
            model.lm_head(hidden).float().logsumexp(-1).sum()
    return sum(seen.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--tokens", type=int, default=304)
    args = p.parse_args()
    import torch

    from verl.models.checkpoint_policy import apply_gradient_checkpointing
    from verl.models.loader import load_causal_lm
    from verl.models.varlen_attention import enable_varlen_attention
    from verl.trainer.config import HFModelConfig
    from verl.utils.default_model import default_model_path

    model, _ = load_causal_lm(HFModelConfig(path=default_model_path(), enable_gradient_checkpointing=False),
                              "actor_rollout_ref.model", dtype=torch.bfloat16)
    enable_varlen_attention(model)
    model.train()
    cfg = model.config
    tokens = args.rows * args.tokens
    ids = torch.randint(3, cfg.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    position_ids = torch.arange(args.tokens).repeat(args.rows).unsqueeze(0)
    cu_seqlens = torch.arange(0, tokens + 1, args.tokens, dtype=torch.int32)
    out = {}
    for policy in (None, "selective"):
        applied = apply_gradient_checkpointing(model, policy)
        layers = _saved_bytes(model, ids, position_ids, cu_seqlens, upto_layers=True)
        total = _saved_bytes(model, ids, position_ids, cu_seqlens, upto_layers=False)
        out[applied] = (layers, total)
        per = layers / tokens / cfg.num_hidden_layers
        print(f"{applied}_mib: {total / _MIB:.1f} (decoder layers {layers / _MIB:.1f}; {per:.0f} bytes per token and "
              f"layer)", flush=True)
    print(f"lm_head_and_loss_mib: {(out['off'][1] - out['off'][0]) / _MIB:.1f}")
    inputs = cfg.num_hidden_layers * tokens * cfg.hidden_size * 2
    print(f"full_layer_inputs_mib: {inputs / _MIB:.1f} ({cfg.num_hidden_layers} x {tokens} x {cfg.hidden_size} x 2)")
    print(f"selective_over_off: {out['selective'][0] / out['off'][0]:.3f} (decoder layers)")


if __name__ == "__main__":
    main()
