"""Rollout speed: vLLM (in-process engine, the hybrid engine) against HF generate, same prompts, same sampling,
same run, on the FSDP2 actor as the trainer builds it; plus the cost of one weight sync and the worker's peak RSS.

    python benchmarks/rollout.py                      # default model, 1 rank, 16 prompts x 64 tokens
    python benchmarks/rollout.py --ranks 2            # two FSDP ranks, one engine each (one core each on 2 cores)

Prints (rank 0):
    rollout_hf_tok_s: ...          rollout_vllm_tok_s: ...
    rollout_vllm_over_hf: R        (target >= 2)
    weight_sync_s: S               (median of --syncs pushes; target < 1 s)
    peak_rss_gb: M                 (the worker process: FSDP actor + engine + KV cache)
Rounds alternate HF and vLLM and the best round of each counts, so load from other processes hurts both alike.
Needs vLLM (`pip install -e .[vllm]`); runs on CPU or GPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUESTIONS = ["Compute {a} + {b}.", "What is {a} times {b}?", "Tom has {a} apples and buys {b} more. How many now?",
             "Write one sentence about the number {a}.", "Is {a} larger than {b}? Explain briefly.",
             "Name {b} animals that live in the sea.", "Subtract {b} from {a}.", "Give a fun fact about the sea."]


def _prompts(tokenizer, count: int, prompt_length: int):
    import torch

    from verl.utils.torch_functional import compute_position_id_with_mask

    rows = []
    for i in range(count):
        text = QUESTIONS[i % len(QUESTIONS)].format(a=3 + 7 * i, b=2 + (i * 5) % 11)
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True, return_dict=True)["input_ids"]
        rows.append(ids[-prompt_length:])
    ids = torch.full((count, prompt_length), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((count, prompt_length), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, prompt_length - len(row):] = torch.tensor(row)
        mask[i, prompt_length - len(row):] = 1
    return ids, mask, compute_position_id_with_mask(mask)


def _rollout_config(args, name: str):
    from omegaconf import OmegaConf

    return OmegaConf.create({
        "name": name, "temperature": args.temperature, "top_k": -1, "top_p": 1.0, "do_sample": True,
        "prompt_length": args.prompt_length, "response_length": args.response_length, "dtype": args.vllm_dtype,
        "gpu_memory_utilization": 0.5, "ignore_eos": False, "enforce_eager": True, "free_cache_engine": True,
        "load_format": "dummy_dtensor", "tensor_model_parallel_size": 1, "max_num_batched_tokens": 8192,
        "max_model_len": None, "max_num_seqs": args.prompts, "enable_chunked_prefill": True,
        "calculate_log_probs": True, "micro_batch_size": None, "disable_log_stats": True,
        "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0.0, "n": 1, "do_sample": False},
        "engine_kwargs": {"vllm": {}},
    })


def _actor_log_probs(module, out, temperature: float):
    import torch

    batch = out.batch
    with torch.no_grad():
        logits = module(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        position_ids=batch["position_ids"]).logits.float()
    width = batch["responses"].size(1)
    logits = logits[:, -width - 1 : -1] / temperature
    return torch.log_softmax(logits, -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)


def _timed_rollout(manager, rollout, data):
    import torch

    start = time.perf_counter()
    with manager:
        sync_s = getattr(manager, "last_sync_s", 0.0)
        gen_start = time.perf_counter()
        torch.manual_seed(0)
        out = rollout.generate_sequences(data)
        gen_s = time.perf_counter() - gen_start
    return out, gen_s, sync_s, time.perf_counter() - start


def _rss_gb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**30


def run(rank: int, world: int, args, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    threads = args.threads or max(1, (os.cpu_count() or 1) // world)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.protocol import DataProto
    from verl.utils.device import get_nccl_backend
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh
    from verl.workers.rollout.registry import build_rollout

    torch.set_num_threads(threads)
    dist.init_process_group(get_nccl_backend(), rank=rank, world_size=world)
    say = print if rank == 0 else (lambda *a, **k: None)
    path = args.model or _default_model()
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    module = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    module.config.use_cache = False
    mesh = create_device_mesh(world)
    module = apply_fsdp2(module, {}, mesh)

    ids, mask, pos = _prompts(tokenizer, args.prompts, args.prompt_length)
    per_rank = args.prompts // world
    rows = slice(rank * per_rank, (rank + 1) * per_rank)
    meta = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    data = DataProto.from_dict({"input_ids": ids[rows], "attention_mask": mask[rows], "position_ids": pos[rows]},
                               meta_info=meta)

    hf_rollout, hf_manager = build_rollout(_rollout_config(args, "hf"), module, tokenizer, path, mesh)
    start = time.perf_counter()
    vllm_rollout, vllm_manager = build_rollout(_rollout_config(args, "vllm"), module, tokenizer, path, mesh)
    say(f"engine_start_s: {time.perf_counter() - start:.1f}  (kv cache {vllm_rollout.engine_kwargs.get('kv_cache_memory_bytes', 0) / 2**20:.0f} MiB)")

    warm = data.slice(0, 1)
    _timed_rollout(vllm_manager, vllm_rollout, warm)  # first sync + first forward: not part of the steady state
    _timed_rollout(hf_manager, hf_rollout, warm)
    best = {"hf": float("inf"), "vllm": float("inf")}
    tokens = {}
    for round_ in range(args.rounds):
        for name, manager, rollout in (("hf", hf_manager, hf_rollout), ("vllm", vllm_manager, vllm_rollout)):
            out, gen_s, sync_s, _ = _timed_rollout(manager, rollout, data)
            local = torch.tensor([int(out.batch["response_mask"].sum())], dtype=torch.long)
            slowest = torch.tensor([gen_s], dtype=torch.float64)
            dist.all_reduce(local)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            tok_s = float(local) / float(slowest)
            say(f"round {round_} {name:4s}: {int(local)} tokens in {float(slowest):.2f}s = {tok_s:.0f} tok/s")
            if float(slowest) / int(local) < best[name]:
                best[name], tokens[name] = float(slowest) / int(local), out
    hf_tok_s, vllm_tok_s = 1 / best["hf"], 1 / best["vllm"]

    syncs = []
    for _ in range(args.syncs):
        dist.barrier()
        syncs.append(vllm_manager.sync_weights())
    rss_awake = _rss_gb()
    vllm_rollout.sleep()
    rss_asleep = _rss_gb()

    out = tokens["vllm"]
    actor = _actor_log_probs(module, out, args.temperature)
    resp_mask = out.batch["response_mask"].bool()
    diff = (out.batch["rollout_log_probs"] - actor)[resp_mask].abs()
    say(f"threads: hf/actor {threads} per rank, vllm engine {vllm_rollout.threads or threads} per rank, "
        f"engine core {vllm_rollout.core}")
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20], dtype=torch.float64)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    say(f"rollout_hf_tok_s: {hf_tok_s:.1f}")
    say(f"rollout_vllm_tok_s: {vllm_tok_s:.1f}")
    say(f"rollout_vllm_over_hf: {vllm_tok_s / hf_tok_s:.2f}")
    say(f"weight_sync_s: {statistics.median(syncs):.3f}  (all: {', '.join(f'{s:.3f}' for s in syncs)})")
    say(f"peak_rss_gb: {float(peak):.2f}  (rank 0 now: {rss_awake:.2f} awake, {rss_asleep:.2f} with the KV cache asleep)")
    say(f"rollout_vs_actor_logprob_absdiff: mean {diff.mean():.4f} max {diff.max():.4f}  "
        f"(engine {args.vllm_dtype} vs actor fp32)")
    vllm_rollout.shutdown()  # also tears down the process group it shares with FSDP
    if dist.is_initialized():
        dist.destroy_process_group()


def _default_model() -> str:
    from verl.utils.default_model import default_model_path

    return default_model_path()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="HF folder (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--prompt-length", type=int, default=64)
    parser.add_argument("--response-length", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--vllm-dtype", default=None,
                        help="engine dtype (default: bfloat16 where the CPU/GPU has native bf16, else float32)")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch threads per rank for the trainer and HF generate (default: cores / ranks, as the "
                             "workers set it); the vLLM engine the same unless VERL_VLLM_THREADS is set)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--syncs", type=int, default=3)
    args = parser.parse_args()
    if args.vllm_dtype is None:
        from verl.utils.device import preferred_low_precision

        args.vllm_dtype = preferred_low_precision()
    if args.prompts % args.ranks:
        parser.error("--prompts must be divisible by --ranks")
    port = _free_port()
    if args.ranks == 1:
        run(0, 1, args, port)
        return
    import torch.multiprocessing as mp

    mp.spawn(run, args=(args.ranks, args, port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
