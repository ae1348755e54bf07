"""Tokens/s and MFU of the FSDP2 actor update on one GPU, against that GPU's measured bf16 matmul peak:

    python benchmarks/gpu_throughput.py                     # a ~200M Llama built from a config, bf16, packed
    python benchmarks/gpu_throughput.py --model /path/hf    # a real HF folder instead
    python benchmarks/gpu_throughput.py --padded --micro 8  # use_remove_padding=false, 8 rows per micro-batch

Without CUDA (or with VERL_DEVICE=cpu) it prints why it skipped and exits 0: benchmarks/throughput.py is the CPU
figure. The actor is built as the trainer builds it (benchmarks/throughput.py: DataParallelPPOActor on an FSDP2
module, world size 1) on the backend verl.utils.device picks (nccl here). The peak is verl's own probe
(verl.utils.flops_counter.measure_matmul_peak) on 8192^2 bf16 matmuls, measured before and after the timed updates
(the higher kept); MFU counts model FLOPs on real tokens only (verl/utils/flops_counter.py).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default=None, help="HF folder (default: a random Llama built from --hidden etc.)")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16", help="mixed_precision.param_dtype")
    p.add_argument("--responses", type=int, default=64, help="rows per update (one optimizer step)")
    p.add_argument("--min-prompt-length", type=int, default=128)
    p.add_argument("--max-prompt-length", type=int, default=512)
    p.add_argument("--min-response-length", type=int, default=64)
    p.add_argument("--max-response-length", type=int, default=512)
    p.add_argument("--padded", action="store_true", help="use_remove_padding=false")
    p.add_argument("--micro", type=int, default=8, help="rows per micro-batch when --token-budget is 0")
    p.add_argument("--token-budget", type=int, default=16384, help=">0: dynamic bsz, ppo_max_token_len_per_gpu")
    p.add_argument("--checkpointing", action="store_true", help="gradient checkpointing on")
    p.add_argument("--repeats", type=int, default=3, help="timed updates; the best counts")
    p.add_argument("--peak-size", type=int, default=8192, help="matmul size of the peak probe")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _built_model(args: argparse.Namespace, folder: str) -> str:
    """A random Llama from a config, saved as an HF folder (no download); sdpa attention."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=4 * args.hidden,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.heads, max_position_embeddings=4096, tie_word_embeddings=False,
                         pad_token_id=0, eos_token_id=2, bos_token_id=1)
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def _join_single_rank() -> None:
    import socket

    import torch
    import torch.distributed as dist

    from verl.utils.device import get_device_id, get_nccl_backend, is_cuda_available

    if is_cuda_available():
        torch.cuda.set_device(get_device_id())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(get_nccl_backend(), init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)


def measure(args: argparse.Namespace, path: str) -> dict[str, float]:
    """Time the actor update on this process's device; the figures main() prints. Device-agnostic: main() only
    calls it where CUDA is."""
    import torch
    from throughput import _actor, _batch

    from verl.utils.device import get_default_device, get_torch_device, is_cuda_available
    from verl.utils.flops_counter import FlopsCounter, measure_matmul_peak

    overrides = {"ppo_mini_batch_size": args.responses, "ppo_micro_batch_size_per_gpu": args.micro,
                 "use_remove_padding": not args.padded, "use_dynamic_bsz": args.token_budget > 0,
                 "ppo_max_token_len_per_gpu": args.token_budget or 16384}
    actor, module, _ = _actor(path, args.dtype, overrides, checkpointing=args.checkpointing)
    cfg = module.config
    data = _batch(args, cfg.vocab_size, int(cfg.eos_token_id), int(cfg.pad_token_id or 0))
    data.meta_info.update({"micro_batch_size": args.micro, "use_dynamic_bsz": args.token_budget > 0,
                           "max_token_len": args.token_budget or 16384})
    old, _ = actor.compute_log_prob(data)
    gen = torch.Generator().manual_seed(args.seed + 1)
    data.batch["old_log_probs"] = old + 0.05 * torch.randn(old.shape, generator=gen)
    data.batch["advantages"] = torch.randn(old.shape, generator=gen) * data.batch["response_mask"]
    lengths = data.batch["attention_mask"].sum(-1).tolist()
    tokens = int(sum(lengths))
    flops = FlopsCounter(module).training_flops(lengths, int(data.batch["response_mask"].sum()))

    device, peak_dtype = get_default_device(), torch.bfloat16 if args.dtype == "bf16" else torch.float32
    sync = get_torch_device().synchronize
    actor.update_policy(data[: max(1, args.responses // 4)])  # warm-up: kernels, allocator
    peaks = [measure_matmul_peak(device, peak_dtype, size=args.peak_size, repeats=10, fresh=True)]
    if is_cuda_available():
        torch.cuda.reset_peak_memory_stats()
    best = float("inf")
    for _ in range(args.repeats):
        sync()
        start = time.perf_counter()
        actor.update_policy(data)
        sync()
        best = min(best, time.perf_counter() - start)
    peaks.append(measure_matmul_peak(device, peak_dtype, size=args.peak_size, repeats=10, fresh=True))
    peak = max(peaks)
    out = {"tokens": tokens, "update_s": best, "tokens_per_s": tokens / best, "model_tflop": flops / 1e12,
           "matmul_peak_tflops": peak / 1e12, "mfu": flops / best / peak}
    if is_cuda_available():
        out["max_memory_allocated_gb"] = torch.cuda.max_memory_allocated() / 2**30
    return out


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    from verl.utils.device import device_preference, is_cuda_available

    if not is_cuda_available():
        why = "VERL_DEVICE=cpu" if device_preference() == "cpu" else "torch sees no CUDA device"
        print(f"gpu_throughput: skipped ({why}); run it on a machine with a GPU. "
              f"The CPU figure is benchmarks/throughput.py.")
        return 0
    import torch

    _join_single_rank()
    with tempfile.TemporaryDirectory() as folder:
        path = args.model or _built_model(args, folder)
        out = measure(args, path)
    print(f"device: {torch.cuda.get_device_name()}; dtype {args.dtype}, remove padding {not args.padded}, "
          f"checkpointing {args.checkpointing}, {args.responses} rows, {out['tokens']} real tokens per update")
    for key, value in out.items():
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
