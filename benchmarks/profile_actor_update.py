"""Where the actor update's time goes, on the demo's shapes, with torch.profiler:

    python benchmarks/profile_actor_update.py                      # the defaults: bf16 where native, remove
                                                                   # padding, gradient checkpointing
    python benchmarks/profile_actor_update.py --no-checkpointing --dtype fp32 --table 40

The batch is the demo's: 32 responses (8 prompts x 4) of up to 48 tokens after arithmetic prompts of ~110-150
tokens left-padded to 256, one optimizer step over all of it, micro-batches of --micro rows (or --token-budget
tokens with dynamic bsz). The actor is built as the trainer builds it (DataParallelPPOActor on an FSDP2 module,
gloo, world size 1, fused AdamW, token-mean loss).

Prints the update time, its model FLOPs over the bf16 (or fp32) matmul peak measured next to it (MFU, and HFU
that counts the recomputed forward under checkpointing), then the profile grouped into the categories of
docs/performance.md (matmuls, LM head + log-softmax, attention, elementwise, casts, FSDP2, optimizer, grad clip,
allocator), and with --table N torch's own top-N operator table.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="HF folder (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", choices=["auto", "bf16", "fp32"], default="auto", help="auto: bf16 where native")
    p.add_argument("--no-checkpointing", action="store_true", help="gradient checkpointing off")
    p.add_argument("--checkpointing-policy", choices=["auto", "full", "selective"], default="auto",
                   help="gradient_checkpointing_policy (auto: selective on a CPU)")
    p.add_argument("--padded", action="store_true", help="use_remove_padding=false")
    p.add_argument("--micro", type=int, default=8, help="rows per micro-batch (ppo_micro_batch_size_per_gpu)")
    p.add_argument("--token-budget", type=int, default=0, help=">0: dynamic bsz with this ppo_max_token_len_per_gpu")
    p.add_argument("--repeats", type=int, default=2, help="timed updates (best counts) before the profiled one")
    p.add_argument("--table", type=int, default=0, help="also print torch's top-N operators by self CPU time")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


def _demo_batch(vocab_size: int, eos_id: int, pad_id: int, seed: int):
    """32 rows: prompts of 110-150 real tokens left-padded to 256, responses of 12-48 tokens right-padded to 48."""
    import torch
    from throughput import _batch

    shape = argparse.Namespace(responses=32, min_prompt_length=110, max_prompt_length=150, prompt_pad_length=256,
                               min_response_length=12, max_response_length=48, seed=seed)
    data = _batch(shape, vocab_size, eos_id, pad_id)
    gen = torch.Generator().manual_seed(seed + 1)
    data.batch["advantages"] = torch.randn(data.batch["responses"].shape, generator=gen) * data.batch["response_mask"]
    return data


# Profile operator name -> category; the first matching rule wins (names as torch.profiler reports them). The LM
# head and log-softmax run as ordinary mm / elementwise ops, so they are timed separately (_time_lm_head).
_CATEGORIES = [
    ("optimizer step", ("Optimizer.step", "_fused_adam", "adamw", "_foreach")),
    ("grad clip", ("clip_grad", "_foreach_norm", "linalg_vector_norm")),
    ("FSDP2 collectives / copies", ("FSDP::", "fsdp", "gloo", "c10d", "all_gather", "reduce_scatter", "split_with_sizes_copy", "chunk_cat")),
    ("attention", ("scaled_dot_product", "_flash_attention", "sdpa")),
    ("matmuls", ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear")),
    ("dtype casts", ("aten::_to_copy", "aten::to", "aten::copy_")),
    ("allocator", ("aten::empty", "aten::zeros", "aten::fill_", "aten::zero_", "aten::resize_")),
]


def _category(name: str) -> str:
    lowered = name.lower()
    for category, keys in _CATEGORIES:
        if any(key.lower() in lowered for key in keys):
            return category
    return "elementwise / other"


def _grouped(prof) -> dict[str, float]:
    """Self CPU seconds per category over the profiled update (self time: every microsecond counted once)."""
    totals: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        totals[_category(event.key)] += event.self_cpu_time_total / 1e6
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def main() -> None:
    args = _args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    from throughput import _actor, _init_single_rank
    from torch.profiler import ProfilerActivity, profile

    from verl.models.checkpoint_policy import resolve_checkpointing_policy
    from verl.utils.default_model import default_model_path
    from verl.utils.device import has_fast_bf16
    from verl.utils.flops_counter import FlopsCounter, measure_matmul_peak
    from verl.utils.malloc_tuning import tune_malloc_for_training

    tune_malloc_for_training()
    dtype = args.dtype if args.dtype != "auto" else ("bf16" if has_fast_bf16() else "fp32")
    path = args.model or default_model_path()
    _init_single_rank()
    overrides = {"ppo_mini_batch_size": 32, "ppo_micro_batch_size_per_gpu": args.micro,
                 "use_remove_padding": not args.padded, "use_dynamic_bsz": args.token_budget > 0,
                 "ppo_max_token_len_per_gpu": args.token_budget or 16384}
    actor, module, optimizer = _actor(path, dtype, overrides, checkpointing=not args.no_checkpointing,
                                      policy=args.checkpointing_policy)
    policy = "off" if args.no_checkpointing else resolve_checkpointing_policy(args.checkpointing_policy)[0]
    data = _demo_batch(module.config.vocab_size, int(module.config.eos_token_id),
                       int(module.config.pad_token_id or 0), args.seed)
    old, _ = actor.compute_log_prob(data.__class__.from_dict(
        tensors=dict(data.batch.items()), meta_info={"temperature": 1.0, "micro_batch_size": 32}))
    data.batch["old_log_probs"] = old
    lengths = data.batch["attention_mask"].sum(-1).tolist()
    response_tokens = int(data.batch["response_mask"].sum())
    flops = FlopsCounter(module).training_flops(lengths, response_tokens)
    print(f"batch: {len(data)} rows, {sum(lengths)} real tokens ({response_tokens} response); dtype {dtype}, "
          f"remove padding {not args.padded}, checkpointing {policy}, "
          f"micro {args.token_budget and f'{args.token_budget} tokens' or f'{args.micro} rows'}", flush=True)

    actor.update_policy(data[:8])  # warm-up: kernels' primitives, the heap grown to a micro-batch's peak
    peak_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    peaks = [measure_matmul_peak("cpu", peak_dtype, repeats=10, fresh=True)]
    best = float("inf")
    for _ in range(args.repeats):
        start = time.perf_counter()
        actor.update_policy(data)
        best = min(best, time.perf_counter() - start)
    peaks.append(measure_matmul_peak("cpu", peak_dtype, repeats=10, fresh=True))
    peak = max(peaks)
    # full checkpointing runs each layer's forward twice; the LM head and the loss once (they are not checkpointed);
    # selective runs no matmul twice
    recompute = 0.0 if policy != "full" else flops / 3 * (1 - _lm_head_share(module, lengths, response_tokens))
    print(f"update_s: {best:.2f}")
    print(f"matmul_peak_gflops: {peak / 1e9:.1f} ({peak_dtype})")
    print(f"update_model_gflop: {flops / 1e9:.1f}")
    print(f"update_mfu: {flops / best / peak:.3f}")
    print(f"update_hfu: {(flops + recompute) / best / peak:.3f}  (counts the recomputed forward)", flush=True)
    print(f"lm_head_logprob_s: {_time_lm_head(module, response_tokens, peak_dtype):.2f}  (the update's LM head matmul, "
          f"log-softmax and entropy on its {response_tokens} response positions, forward + backward)", flush=True)

    with profile(activities=[ProfilerActivity.CPU], record_shapes=False) as prof:
        start = time.perf_counter()
        actor.update_policy(data)
        profiled = time.perf_counter() - start
    grouped = _grouped(prof)
    total = sum(grouped.values())
    print(f"\nprofiled update: {profiled:.2f} s wall (profiler overhead included), {total:.2f} s self CPU time in ops")
    for category, seconds in grouped.items():
        print(f"  {category:28s} {seconds:7.2f} s  {seconds / total:6.1%}")
    if args.table:
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.table))


def _time_lm_head(module, positions: int, dtype, repeats: int = 3) -> float:
    """Seconds of the LM head's share of one update, timed on its own: the (positions x hidden) @ (hidden x vocab)
    matmul, log-probs of the labels and the entropy metric, forward and backward. The profile cannot tell these
    apart from the layers' matmuls and elementwise ops, so they are timed here."""
    import torch

    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    cfg = module.config
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(cfg.vocab_size, cfg.hidden_size, generator=gen).to(dtype) * 0.02
    hidden = torch.randn(positions, cfg.hidden_size, generator=gen).to(dtype).requires_grad_()
    weight.requires_grad_()
    labels = torch.randint(0, cfg.vocab_size, (positions,), generator=gen)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        logits = hidden @ weight.t()
        log_probs = logprobs_from_logits(logits, labels)
        with torch.no_grad():
            entropy_from_logits(logits.detach())
        log_probs.sum().backward()
        best = min(best, time.perf_counter() - start)
        hidden.grad = weight.grad = None
    return best


def _lm_head_share(module, lengths: list[int], response_tokens: int) -> float:
    """The LM head's share of the update's model FLOPs: its matmul runs only on the response positions."""
    from verl.utils.flops_counter import FlopsCounter

    cfg = module.config
    head = 6 * response_tokens * cfg.hidden_size * cfg.vocab_size
    return head / FlopsCounter(module).training_flops(lengths, response_tokens)


if __name__ == "__main__":
    main()
