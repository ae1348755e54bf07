"""LoRA (rank 16) against full fine-tuning: the actor worker's peak memory and update time per step, at the demo's
shapes (SmolLM2-135M-Instruct, 8 prompts x 4 responses, ~130-token prompts left-padded to 256, responses up to 48,
packed with dynamic batch size, bf16 compute where the CPU has it), both measured in this run:

    flock /tmp/heavy.lock .venv/bin/python benchmarks/lora.py [--steps 3] [--rank 16]

Each variant runs in its own process (a fresh peak-RSS count): an ActorRolloutRefWorker (role actor, one gloo
rank) built by init_model exactly as in a run, one warm-up update, then --steps timed updates on the same batch.
Prints per variant the peak RSS after building (model + optimizer) and over the updates, the update seconds
(median), and the ratios lora / full.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROMPTS, N, PROMPT_LEN, RESPONSE_LEN, REAL_PROMPT = 8, 4, 256, 48, 130


def _overrides(rank: int, precision: str) -> list[str]:
    """The demo's actor keys (scripts/demo.sh), plus LoRA when rank > 0."""
    from verl.utils.default_model import default_model_path

    arr = "actor_rollout_ref"
    keys = [f"{arr}.model.path={default_model_path()}", "algorithm.adv_estimator=grpo", "trainer.n_gpus_per_node=1",
            f"data.train_batch_size={PROMPTS}", f"data.max_prompt_length={PROMPT_LEN}",
            f"data.max_response_length={RESPONSE_LEN}", f"{arr}.rollout.n={N}",
            f"{arr}.actor.ppo_mini_batch_size={PROMPTS}", f"{arr}.actor.ppo_micro_batch_size_per_gpu=8",
            f"{arr}.rollout.log_prob_micro_batch_size_per_gpu=32", f"{arr}.model.use_remove_padding=true",
            f"{arr}.actor.use_dynamic_bsz=true", f"{arr}.actor.ppo_max_token_len_per_gpu=2432",
            f"{arr}.rollout.log_prob_use_dynamic_bsz=true", f"{arr}.rollout.log_prob_max_token_len_per_gpu=9728",
            f"{arr}.actor.fsdp_config.mixed_precision.param_dtype={precision}", "trainer.logger=[]"]
    if rank > 0:
        keys += [f"{arr}.model.lora_rank={rank}", f"{arr}.model.lora_alpha={2 * rank}", f"{arr}.actor.optim.lr=1e-4"]
    return keys


def _batch(vocab: int, seed: int = 0):
    """32 rollout-shaped rows: left-padded ~REAL_PROMPT-token prompts, responses of 16..48 tokens."""
    import torch

    from verl.protocol import DataProto
    from verl.utils.torch_functional import compute_position_id_with_mask

    gen = torch.Generator().manual_seed(seed)
    rows = PROMPTS * N
    prompts = torch.zeros(rows, PROMPT_LEN, dtype=torch.long)
    prompt_mask = torch.zeros(rows, PROMPT_LEN, dtype=torch.long)
    responses = torch.zeros(rows, RESPONSE_LEN, dtype=torch.long)
    response_mask = torch.zeros(rows, RESPONSE_LEN, dtype=torch.long)
    for i in range(rows):
        plen = REAL_PROMPT + int(torch.randint(-10, 11, (1,), generator=gen))
        rlen = int(torch.randint(16, RESPONSE_LEN + 1, (1,), generator=gen))
        prompts[i, -plen:] = torch.randint(10, vocab, (plen,), generator=gen)
        prompt_mask[i, -plen:] = 1
        responses[i, :rlen] = torch.randint(10, vocab, (rlen,), generator=gen)
        response_mask[i, :rlen] = 1
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    data = DataProto.from_dict(tensors={
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": attention_mask, "position_ids": compute_position_id_with_mask(attention_mask),
        "response_mask": response_mask}, meta_info={"temperature": 1.0})
    data.batch["advantages"] = torch.randn(responses.shape, generator=gen) * response_mask
    return data


def _variant(rank: int, steps: int, precision: str, out_file: str) -> None:
    """One variant in this process: build the worker, update, write the figures as JSON."""
    import torch
    import torch.distributed as dist

    from verl.trainer.config import load_config, validate_config
    from verl.utils.memory_stats import peak_rss_gb, reset_peak_rss
    from verl.workers import fsdp_workers

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1)))
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=os.environ.get("BENCH_PORT", "29533"))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        config = validate_config(load_config(_overrides(rank, precision)), check_files=False)
        worker = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor")
        worker.init_model()
        module = worker.actor_module
        trainable = sum(p.numel() for p in module.parameters() if p.requires_grad)
        built_gb = peak_rss_gb()
        data = _batch(worker.tokenizer.vocab_size)
        data.batch["old_log_probs"] = worker.compute_log_prob(data).batch["old_log_probs"]
        worker.update_actor(data)  # warm-up: allocates gradients and Adam's moments
        times = []
        reset_peak_rss()
        for _ in range(steps):
            start = time.perf_counter()
            worker.update_actor(data)
            times.append(time.perf_counter() - start)
        result = {"rank": rank, "trainable_params": trainable, "built_rss_gb": built_gb,
                  "update_rss_peak_gb": peak_rss_gb(), "update_s": statistics.median(times), "times": times,
                  "optimizer_state_tensors": sum(len(s) for s in worker.actor_optimizer.state.values())}
        Path(out_file).write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def _run_variant(rank: int, steps: int, precision: str, tmp: Path) -> dict:
    out = tmp / f"lora_bench_{rank}.json"
    cmd = [sys.executable, __file__, "--child", str(rank), "--steps", str(steps), "--precision", precision,
           "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=REPO)
    return json.loads(out.read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--precision", default=None, help="bf16 | fp32 (default: what verl.utils.device picks)")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.precision is None:
        from verl.utils.device import preferred_low_precision

        args.precision = preferred_low_precision()
    if args.child is not None:
        _variant(args.child, args.steps, args.precision, args.out)
        return
    import tempfile

    from verl.utils.device import _cpu_flags

    with tempfile.TemporaryDirectory() as tmp:
        full = _run_variant(0, args.steps, args.precision, Path(tmp))
        lora = _run_variant(args.rank, args.steps, args.precision, Path(tmp))
    flags = sorted(_cpu_flags() & {"avx512_bf16", "amx_bf16", "avx512f", "avx2"})
    print(f"cpu flags: {' '.join(flags)}  precision: {args.precision}  steps: {args.steps}")
    for name, r in (("full", full), (f"lora_r{args.rank}", lora)):
        print(f"{name}: trainable_params {r['trainable_params']:,}  built_rss_gb {r['built_rss_gb']:.2f}  "
              f"update_rss_peak_gb {r['update_rss_peak_gb']:.2f}  update_s {r['update_s']:.2f}  "
              f"(steps {', '.join(f'{t:.2f}' for t in r['times'])})")
    print(f"update_rss_peak_ratio (lora/full): {lora['update_rss_peak_gb'] / full['update_rss_peak_gb']:.3f}")
    print(f"update_time_ratio (lora/full): {lora['update_s'] / full['update_s']:.3f}")
    print(f"trainable_ratio (lora/full): {lora['trainable_params'] / full['trainable_params']:.4f}")


if __name__ == "__main__":
    main()
