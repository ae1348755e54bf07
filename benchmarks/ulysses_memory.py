"""Ulysses sequence parallelism: peak memory per rank of one actor update on a long packed micro-batch, at sp=1
(one rank, the whole micro-batch) and sp=2 (two gloo ranks, half of every packed row each), measured in this run:

    flock /tmp/heavy.lock .venv/bin/python benchmarks/ulysses_memory.py [--tokens 4096] [--seqs 4]

The model is a Llama built from a config (no download): hidden 512, 4 layers, 8 heads (4 kv), vocab 8192, fp32,
sdpa per packed segment. The micro-batch is --seqs sequences of --tokens / --seqs tokens each (a quarter prompt,
the rest response), packed into one row. Each rank holds a full replica of the weights (no FSDP here: the point is
the activations, which sp divides; FSDP's weight sharding over all ranks comes on top and is measured elsewhere).
Per rank: the RSS after building model, optimizer and batch, and the rise of the peak RSS (Linux VmHWM, reset
just before) over the first update_policy (forward, backward, SGD step): activations, logits and gradients.
On a CUDA machine the same is read from torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

_GIB = 1024**3


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=8192, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=8192,
                         tie_word_embeddings=True, pad_token_id=0, eos_token_id=2, bos_token_id=1)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(config).float()


def _batch(tokens: int, seqs: int):
    from verl.protocol import DataProto
    from verl.utils.torch_functional import compute_position_id_with_mask

    length = tokens // seqs
    prompt_len = length // 4
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(3, 8192, (seqs, prompt_len), generator=gen)
    responses = torch.randint(3, 8192, (seqs, length - prompt_len), generator=gen)
    input_ids = torch.cat([prompts, responses], 1)
    mask = torch.ones_like(input_ids)
    response_mask = torch.ones_like(responses)
    data = DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "input_ids": input_ids, "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask), "response_mask": response_mask,
        "old_log_probs": torch.full(responses.shape, -9.0), "advantages": torch.randn(responses.shape, generator=gen),
    }, meta_info={"temperature": 1.0})
    return data


def _rank(rank: int, world: int, port: int, tokens: int, seqs: int, results) -> None:
    from tests.helpers.typed_config import typed_section
    from verl.utils.memory_stats import peak_rss_gb, reset_peak_rss
    from verl.utils.ulysses import create_ulysses_group, set_ulysses_sequence_parallel_group
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.config import FSDPActorConfig

    torch.set_num_threads(max(1, (os.cpu_count() or 2) // world))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        set_ulysses_sequence_parallel_group(create_ulysses_group(world, "actor"))
        model = _model()
        config = typed_section(FSDPActorConfig, {
            "ppo_mini_batch_size": seqs, "ppo_micro_batch_size_per_gpu": seqs, "use_dynamic_bsz": False,
            "ppo_epochs": 1, "shuffle": False, "grad_clip": 1e6, "loss_agg_mode": "token-mean",
            "entropy_coeff": 0.0, "use_kl_loss": False, "use_remove_padding": True,
            "ulysses_sequence_parallel_size": world})
        actor = DataParallelPPOActor(config, model, torch.optim.SGD(model.parameters(), lr=1e-4))
        data = _batch(tokens, seqs)
        # no warm-up: the allocator keeps freed pages mapped, so a second update's rise would count only what the
        # first did not leave behind; the first update's rise over the built state is all it needs
        dist.barrier()
        base = peak_rss_gb() if reset_peak_rss() else float("nan")
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        actor.update_policy(data)
        seconds = time.perf_counter() - start
        results[(world, rank)] = {"base_gb": base, "rise_gb": peak_rss_gb() - base, "seconds": seconds,
                                  "cuda_gb": torch.cuda.max_memory_allocated() / _GIB if torch.cuda.is_available()
                                  else None}
    finally:
        dist.destroy_process_group()


def _run(world: int, tokens: int, seqs: int) -> dict:
    from tests.helpers.ranks import free_port

    manager = mp.Manager()
    results = manager.dict()
    mp.start_processes(_rank, args=(world, free_port(), tokens, seqs, results), nprocs=world, join=True,
                       start_method="spawn")
    out = dict(results)
    manager.shutdown()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--seqs", type=int, default=4)
    args = parser.parse_args()
    rows = {**_run(1, args.tokens, args.seqs), **_run(2, args.tokens, args.seqs)}
    print(f"one actor update, {args.tokens} packed tokens in {args.seqs} sequences, fp32, "
          f"torch {torch.__version__}, {os.cpu_count()} CPUs")
    print("| sp | rank | RSS before (GiB) | peak rise over the update (GiB) | update (s) |")
    print("|---|---|---|---|---|")
    for (world, rank), row in sorted(rows.items()):
        print(f"| {world} | {rank} | {row['base_gb']:.2f} | {row['rise_gb']:.3f} | {row['seconds']:.1f} |"
              + (f" cuda peak {row['cuda_gb']:.3f} GiB" if row["cuda_gb"] is not None else ""))
    sp1 = rows[(1, 0)]["rise_gb"]
    sp2 = max(rows[(2, r)]["rise_gb"] for r in range(2))
    print(f"peak rise per rank, sp2 / sp1 (worst rank): {sp2 / sp1:.2f}")


if __name__ == "__main__":
    main()
