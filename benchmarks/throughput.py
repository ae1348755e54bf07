"""Actor-update throughput on the default model, every figure measured in this run on this machine:

    python benchmarks/throughput.py                   # 32 responses of 8-256 tokens after 16-64 token prompts

Prints `name: value` lines, the target last:
    update_s                                      update_policy with the trainer's defaults: the run's dtype (bf16
                                                  mixed precision where native, fp32 where emulated), remove padding
                                                  + dynamic bsz (--token-budget), gradient checkpointing
                                                  under gradient_checkpointing_policy=auto (selective on a CPU)
    update_full_checkpointing_s                   the same with policy full (upstream's: whole layers recomputed)
    update_no_checkpointing_s, checkpointing_cost the same without checkpointing, and the ratios (time and peak RSS)
    update_padded_s, update_rmpad_over_padded     padded fixed micro-batches of --micro rows (no checkpointing)
    update_fp32_no_checkpointing_s,               the other dtype: fp32 where bf16 is native; where bf16 is emulated
    update_bf16_over_fp32                         (no AVX512-BF16 / AMX) both on the --bf16-slice-rows shortest rows
    matmul_peak_gflops                            best (2048 x 2048) matmul of 10 in the run's dtype, same threads,
                                                  measured right before and right after the timed update (the higher:
                                                  this machine's speed drifts by 10-20% over minutes)
    update_*_mfu, update_full_checkpointing_hfu,  model FLOPs of the real tokens (verl/utils/flops_counter.py) over
    update_mfu                                    the update time (optimizer included) and that peak; HFU also counts
                                                  the forward that full checkpointing runs again (selective runs no
                                                  matmul again, so its HFU is its MFU)
    peak_rss_gb_*                                 this process during each configuration (VmHWM, reset between)
Host memory: glibc is told to keep freed blocks (verl/utils/malloc_tuning.py); --no-malloc-tuning measures without.
All updates run the actor as the trainer does: DataParallelPPOActor on an FSDP2 module (gloo, world size 1),
fused AdamW, token-mean loss, one optimizer step over the whole batch. Each configuration warms up on 2 x --micro
rows, then runs --repeats times on the whole batch; the best time counts (other load only ever slows a run down).
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="HF folder (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--responses", type=int, default=32)
    p.add_argument("--max-prompt-length", type=int, default=64)
    p.add_argument("--min-prompt-length", type=int, default=16)
    p.add_argument("--max-response-length", type=int, default=256)
    p.add_argument("--min-response-length", type=int, default=8)

    p.add_argument("--micro", type=int, default=4, help="padded baseline: rows per micro-batch")
    p.add_argument("--token-budget", type=int, default=1280,
                   help="ppo_max_token_len_per_gpu with dynamic bsz (default: the padded micro-batch's 4 x 320 slots, "
                        "so both hold the same activation memory)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's, i.e. the cores)")
    p.add_argument("--repeats", type=int, default=3,
                   help="timed updates per configuration; the first full-size one grows the heap (page faults)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-malloc-tuning", action="store_true", help="keep glibc's defaults (see malloc_tuning.py)")
    p.add_argument("--bf16", choices=["auto", "yes", "no", "slice"], default="auto",
                   help="bf16 vs fp32 update: yes = on the whole batch, slice = on the --bf16-slice-rows shortest rows, "
                        "no = skip; "
                        "auto = whole batch where the CPU has native bf16, slice where it is emulated")
    p.add_argument("--bf16-slice-rows", type=int, default=2, help="the shortest rows of the batch for --bf16 slice")
    return p.parse_args()


def _init_single_rank() -> None:
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def _batch(args, vocab_size: int, eos_id: int, pad_id: int):
    """Left-padded prompts and right-padded responses (EOS at the end of shorter ones), lengths spread uniformly."""
    import torch

    from verl.protocol import DataProto
    from verl.utils.torch_functional import compute_position_id_with_mask, get_response_mask

    gen = torch.Generator().manual_seed(args.seed)
    # prompts left-padded to max_prompt_length, or to a longer prompt_pad_length (the demo's 256)
    n, r_len = args.responses, args.max_response_length
    p_len = getattr(args, "prompt_pad_length", None) or args.max_prompt_length
    prompt_lengths = torch.randint(args.min_prompt_length, args.max_prompt_length + 1, (n,), generator=gen)
    response_lengths = torch.linspace(args.min_response_length, r_len, n).round().long()[torch.randperm(n, generator=gen)]
    ids = torch.randint(3, vocab_size, (n, p_len + r_len), generator=gen)
    ids[ids == eos_id] = eos_id + 1
    prompt_mask = torch.zeros(n, p_len, dtype=torch.long)
    for row in range(n):
        ids[row, : p_len - prompt_lengths[row]] = pad_id
        prompt_mask[row, p_len - prompt_lengths[row] :] = 1
        length = int(response_lengths[row])
        if length < r_len:
            ids[row, p_len + length - 1] = eos_id
            ids[row, p_len + length :] = pad_id
    responses = ids[:, p_len:]
    response_mask = get_response_mask(responses, eos_id)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    tensors = {"input_ids": ids, "responses": responses, "attention_mask": attention_mask,
               "position_ids": compute_position_id_with_mask(attention_mask), "response_mask": response_mask}
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0})


def _actor(path: str, param_dtype: str, actor_overrides: dict, checkpointing: bool = False, policy: str = "auto"):
    """The actor as the trainer builds it, from the typed config sections (HFModelConfig, FSDPEngineConfig, FSDPActorConfig)."""
    from verl.models.loader import load_causal_lm
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.config import (
        FSDPActorConfig,
        FSDPEngineConfig,
        FSDPOptimizerConfig,
        HFModelConfig,
        MixedPrecisionConfig,
    )
    from verl.workers.fsdp_utils import apply_fsdp2, build_optimizer, create_device_mesh

    model_cfg = HFModelConfig(path=path, enable_gradient_checkpointing=checkpointing, gradient_checkpointing_policy=policy)
    module, _ = load_causal_lm(model_cfg, "model")
    fsdp_cfg = FSDPEngineConfig(mixed_precision=MixedPrecisionConfig(param_dtype=param_dtype, reduce_dtype="fp32"))
    module = apply_fsdp2(module, fsdp_cfg, create_device_mesh(1))
    fields = {"ppo_mini_batch_size": 1, "ppo_micro_batch_size_per_gpu": 8, "use_dynamic_bsz": False,
              "ppo_max_token_len_per_gpu": 16384, "ppo_epochs": 1, "shuffle": False, "grad_clip": 1.0,
              "clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0,
              "loss_agg_mode": "token-mean", "entropy_coeff": 0.0, "use_kl_loss": False, "use_remove_padding": True,
              **actor_overrides}
    cfg = FSDPActorConfig(**fields, optim=FSDPOptimizerConfig(lr=1e-7, weight_decay=0.0))
    optimizer = build_optimizer(module, cfg.optim, "actor.optim")
    return DataParallelPPOActor(cfg, module, optimizer), module, optimizer


class _OptimizerClock:
    """Wraps optimizer.step to time it: the update's optimizer share is memory-bound work, not model FLOPs."""

    def __init__(self, optimizer) -> None:
        self.seconds = 0.0
        self._step = optimizer.step

        def timed(*a, **k):
            start = time.perf_counter()
            try:
                return self._step(*a, **k)
            finally:
                self.seconds += time.perf_counter() - start

        optimizer.step = timed


def _time_update(actor, optimizer, data, repeats: int, warmup_rows: int) -> tuple[float, float]:
    """(best update seconds, that run's optimizer seconds) after one warm-up update on the first rows.

    The warm-up builds the kernels' primitives and grows the heap to a micro-batch's peak (micro-batches have
    the same shapes / token budget whatever the batch size), at a fraction of a full update's cost.
    """
    clock = _OptimizerClock(optimizer)
    actor.update_policy(data[:warmup_rows])
    best = (float("inf"), 0.0)
    for _ in range(repeats):
        clock.seconds = 0.0
        start = time.perf_counter()
        actor.update_policy(data)
        best = min(best, (time.perf_counter() - start, clock.seconds))
    return best


class _Timed:
    """One configuration's figures: best update seconds, that run's optimizer seconds, peak RSS, matmul peak."""

    def __init__(self, seconds: float, optimizer_s: float, rss_gb: float, peak: float | None) -> None:
        self.seconds, self.optimizer_s, self.rss_gb, self.peak = seconds, optimizer_s, rss_gb, peak


def _run_configuration(path: str, dtype: str, actor_cfg: dict, data, repeats: int, warmup_rows: int,
                       peak_dtype=None, checkpointing: bool = False, policy: str = "auto") -> _Timed:
    """Build an actor, time its update, free it (and the heap's free blocks, so the next peak RSS is its own).

    With ``peak_dtype`` the matmul peak is measured right before and right after the timed updates and the higher
    one kept: the peak a ratio is taken against comes from the same minutes as the time it divides.
    """

    from verl.utils.flops_counter import measure_matmul_peak
    from verl.utils.malloc_tuning import release_free_memory
    from verl.utils.memory_stats import peak_rss_gb, reset_peak_rss

    gc.collect()
    release_free_memory()
    reset_peak_rss()
    actor, _, optimizer = _actor(path, dtype, actor_cfg, checkpointing, policy)
    peaks = []
    if peak_dtype is not None:
        peaks.append(measure_matmul_peak("cpu", peak_dtype, repeats=10, fresh=True))
    seconds, optimizer_s = _time_update(actor, optimizer, data, repeats, warmup_rows)
    if peak_dtype is not None:
        peaks.append(measure_matmul_peak("cpu", peak_dtype, repeats=10, fresh=True))
    rss = peak_rss_gb()
    del actor, optimizer
    return _Timed(seconds, optimizer_s, rss, max(peaks) if peaks else None)


def _old_log_probs(actor, data, args) -> None:
    """old_log_probs from this policy with some noise, and random advantages: a realistic mix of clipped ratios."""
    import torch

    data.meta_info.update({"use_dynamic_bsz": True, "max_token_len": args.token_budget})
    start = time.perf_counter()
    old, _ = actor.compute_log_prob(data)
    print(f"compute_log_prob_rmpad_dynbsz_s: {time.perf_counter() - start:.2f}", flush=True)
    gen = torch.Generator().manual_seed(args.seed + 1)
    data.batch["old_log_probs"] = old + 0.05 * torch.randn(old.shape, generator=gen)
    data.batch["advantages"] = torch.randn(old.shape, generator=gen) * data.batch["response_mask"]


def main() -> None:
    args = _args()
    if args.no_malloc_tuning:
        os.environ["VERL_MALLOC_TUNING"] = "0"
    import torch

    from verl.utils.default_model import default_model_path
    from verl.utils.device import has_fast_bf16
    from verl.utils.flops_counter import FlopsCounter, measure_matmul_peak
    from verl.utils.malloc_tuning import tune_malloc_for_training

    print(f"malloc_tuned: {tune_malloc_for_training()}", flush=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    path = args.model or default_model_path()
    _init_single_rank()
    print(f"threads: {torch.get_num_threads()}", flush=True)
    # the run's own dtype, as the trainer's default picks it: bf16 where native, fp32 where emulated
    run_dtype = "bf16" if has_fast_bf16() else "fp32"
    run_peak_dtype = torch.bfloat16 if run_dtype == "bf16" else torch.float32
    bf16_mode = {"auto": "yes" if has_fast_bf16() else "slice"}.get(args.bf16, args.bf16)

    actor, module, _ = _actor(path, "fp32", {"use_remove_padding": True})
    config = module.config
    data = _batch(args, config.vocab_size, int(config.eos_token_id), int(config.pad_token_id or 0))
    lengths = data.batch["attention_mask"].sum(-1)
    response_tokens = int(data.batch["response_mask"].sum())
    counter = FlopsCounter(module)
    flops = counter.training_flops(lengths.tolist(), response_tokens)
    # full checkpointing runs every decoder layer's forward again in the backward (the LM head and loss once)
    head_flops = 6 * response_tokens * config.hidden_size * config.vocab_size
    recompute_flops = (flops - head_flops) / 3
    print(f"batch: {len(data)} rows, {int(lengths.sum())} real tokens ({response_tokens} response) of "
          f"{data.batch['attention_mask'].numel()} padded; run dtype {run_dtype}", flush=True)
    _old_log_probs(actor, data, args)
    del actor, module

    one_step = {"ppo_mini_batch_size": args.responses}  # one optimizer step over the whole batch
    rmpad_cfg = {**one_step, "use_remove_padding": True, "use_dynamic_bsz": True,
                 "ppo_max_token_len_per_gpu": args.token_budget}
    padded_cfg = {**one_step, "ppo_micro_batch_size_per_gpu": args.micro}
    warmup = min(len(data), 2 * args.micro)
    # the defaults: the run's dtype, remove padding, gradient checkpointing (policy auto)
    from verl.models.checkpoint_policy import resolve_checkpointing_policy

    policy = resolve_checkpointing_policy("auto")[0]
    run = _run_configuration(path, run_dtype, rmpad_cfg, data, args.repeats, warmup, peak_dtype=run_peak_dtype,
                             checkpointing=True)
    print(f"update_s: {run.seconds:.2f} (checkpointing policy auto -> {policy})", flush=True)
    full = run
    if policy != "full":
        full = _run_configuration(path, run_dtype, rmpad_cfg, data, args.repeats, warmup, peak_dtype=run_peak_dtype,
                                  checkpointing=True, policy="full")
    print(f"update_full_checkpointing_s: {full.seconds:.2f}", flush=True)
    no_ckpt = _run_configuration(path, run_dtype, rmpad_cfg, data, args.repeats, warmup, peak_dtype=run_peak_dtype)
    print(f"update_no_checkpointing_s: {no_ckpt.seconds:.2f}", flush=True)
    padded = _run_configuration(path, run_dtype, padded_cfg, data, args.repeats, warmup)
    print(f"update_padded_s: {padded.seconds:.2f}", flush=True)
    rss = {"default": run.rss_gb, "full_checkpointing": full.rss_gb, "no_checkpointing": no_ckpt.rss_gb,
           "padded_no_checkpointing": padded.rss_gb}
    other_ratio = None
    if run_dtype == "bf16" and bf16_mode == "yes":
        fp32 = _run_configuration(path, "fp32", rmpad_cfg, data, args.repeats, warmup, peak_dtype=torch.float32)
        print(f"update_fp32_no_checkpointing_s: {fp32.seconds:.2f}", flush=True)
        rss["fp32_no_checkpointing"] = fp32.rss_gb
        other_ratio = f"{fp32.seconds / no_ckpt.seconds:.2f}"
        print(f"update_fp32_mfu: {flops / fp32.seconds / fp32.peak:.3f} (of {fp32.peak / 1e9:.1f} GFLOP/s fp32)")
    elif bf16_mode in ("slice", "yes"):
        # where bf16 is emulated, a few of the shortest rows (the slice's cost is what emulation multiplies)
        rows = data.select_idxs(torch.argsort(lengths)[: args.bf16_slice_rows])
        slice_cfg = {**rmpad_cfg, "ppo_mini_batch_size": len(rows)}
        fp32_slice = _run_configuration(path, "fp32", slice_cfg, rows, 1, 1)
        bf16_slice = _run_configuration(path, "bf16", slice_cfg, rows, 1, 1)
        print(f"update_fp32_slice_s: {fp32_slice.seconds:.2f}", flush=True)
        print(f"update_bf16_slice_s: {bf16_slice.seconds:.2f}", flush=True)
        peak_bf16 = measure_matmul_peak("cpu", torch.bfloat16, repeats=10)
        other_ratio = (f"{fp32_slice.seconds / bf16_slice.seconds:.3f} (on the {args.bf16_slice_rows} shortest rows, "
                       f"{int(rows.batch['attention_mask'].sum())} tokens; bf16 matmul {peak_bf16 / 1e9:.1f} GFLOP/s "
                       f"here{'' if has_fast_bf16() else ', emulated'})")

    print(f"update_rmpad_over_padded: {padded.seconds / no_ckpt.seconds:.2f} (both without checkpointing)")
    print(f"checkpointing_cost: {policy} {run.seconds / no_ckpt.seconds:.2f}, full {full.seconds / no_ckpt.seconds:.2f}"
          f" (update time over no checkpointing; peak RSS {run.rss_gb:.2f} / {full.rss_gb:.2f} / {no_ckpt.rss_gb:.2f} GB)")
    if other_ratio is not None:
        print(f"update_bf16_over_fp32: {other_ratio}")
    print(f"update_model_gflop: {flops / 1e9:.1f} (+{recompute_flops / 1e9:.1f} recomputed under full checkpointing)")
    print(f"update_optimizer_s: {run.optimizer_s:.2f}")
    for name, gb in rss.items():
        print(f"peak_rss_gb_{name}: {gb:.2f}")
    print(f"matmul_peak_gflops: {run.peak / 1e9:.1f} ({run_dtype})")
    print(f"update_no_checkpointing_mfu: {flops / no_ckpt.seconds / no_ckpt.peak:.3f}")
    print(f"update_full_checkpointing_mfu: {flops / full.seconds / full.peak:.3f}")
    print(f"update_full_checkpointing_hfu: {(flops + recompute_flops) / full.seconds / full.peak:.3f} (counting the "
          "recomputed forward)")
    print(f"update_mfu: {flops / run.seconds / run.peak:.3f} (the defaults, {run_dtype}, model FLOPs; target >= 0.6)")


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
