"""Gradient checkpointing off / selective / selective-torch / full, interleaved on one actor so each sees the same
machine:

    python benchmarks/checkpointing_policy.py [--rounds 3]

`selective` is what the default runs on a CPU for this model (the recompute functions of
verl/models/selective_recompute.py); `selective-torch` is the same policy through torch's selective-checkpointing
mode, which other models get. The actor, batch and dtype are throughput.py's defaults (32 responses of 8-256 tokens,
the run's dtype, remove padding + dynamic bsz, one optimizer step, lr 1e-7 so the weights barely move). One module is
built; before each update it is switched to the next policy (verl.models.checkpoint_policy), round after round.
Separate processes, as throughput.py runs them, drift apart by 10-20% on a shared 2-core box; here every round times
all four within about a minute. Peak memory per policy is throughput.py's (peak RSS needs a fresh process each);
bytes kept for backward are benchmarks/saved_activations.py's.

Prints per update `<policy> <seconds>`, then per policy the best and median, its MFU (model FLOPs of the real
tokens over the best time and the matmul peak measured before and after), and `selective_torch_over_off`,
`selective_over_full` and `selective_over_off` (best over best) last.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POLICIES = ("off", "selective", "selective-torch", "full")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    import throughput
    import torch

    from verl.models import checkpoint_policy
    from verl.utils.default_model import default_model_path
    from verl.utils.device import has_fast_bf16
    from verl.utils.flops_counter import FlopsCounter, measure_matmul_peak
    from verl.utils.malloc_tuning import tune_malloc_for_training

    tune_malloc_for_training()
    torch.manual_seed(0)
    sys.argv = sys.argv[:1]  # throughput's own defaults for the batch
    batch_args = throughput._args()
    path = default_model_path()
    throughput._init_single_rank()
    dtype = "bf16" if has_fast_bf16() else "fp32"
    peak_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32

    actor, module, _ = throughput._actor(path, "fp32", {"use_remove_padding": True})
    config = module.config
    data = throughput._batch(batch_args, config.vocab_size, int(config.eos_token_id), int(config.pad_token_id or 0))
    lengths = data.batch["attention_mask"].sum(-1)
    flops = FlopsCounter(module).training_flops(lengths.tolist(), int(data.batch["response_mask"].sum()))
    throughput._old_log_probs(actor, data, batch_args)
    del actor, module

    cfg = {"ppo_mini_batch_size": len(data), "use_remove_padding": True, "use_dynamic_bsz": True,
           "ppo_max_token_len_per_gpu": batch_args.token_budget}
    actor, module, _ = throughput._actor(path, dtype, cfg, checkpointing=True)

    def switch(policy: str) -> None:
        if policy == "selective-torch":  # torch's mode even where the recompute functions apply
            checkpoint_policy.apply_gradient_checkpointing(module, None)
            kwargs = checkpoint_policy.checkpointing_kwargs("selective")
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            return
        applied = checkpoint_policy.apply_gradient_checkpointing(module, None if policy == "off" else policy)
        assert applied == policy, (policy, applied)

    actor.update_policy(data[:8])  # warm-up
    peak = measure_matmul_peak("cpu", peak_dtype, repeats=10, fresh=True)
    times: dict[str, list[float]] = {name: [] for name in POLICIES}
    for _ in range(args.rounds):
        for name in POLICIES:
            switch(name)
            start = time.perf_counter()
            actor.update_policy(data)
            times[name].append(time.perf_counter() - start)
            print(f"{name} {times[name][-1]:.2f}", flush=True)
    peak = max(peak, measure_matmul_peak("cpu", peak_dtype, repeats=10, fresh=True))
    print(f"batch: {len(data)} rows, {int(lengths.sum())} real tokens, {dtype}; matmul peak {peak / 1e9:.1f} GFLOP/s; "
          f"model {flops / 1e9:.1f} GFLOP")
    best = {name: min(t) for name, t in times.items()}
    for name, t in times.items():
        print(f"{name}: best {best[name]:.2f} s, median {sorted(t)[len(t) // 2]:.2f} s, mfu {flops / best[name] / peak:.3f}")
    print(f"selective_torch_over_off: {best['selective-torch'] / best['off']:.3f}")
    print(f"selective_over_full: {best['selective'] / best['full']:.3f}")
    print(f"selective_over_off: {best['selective'] / best['off']:.3f}")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
