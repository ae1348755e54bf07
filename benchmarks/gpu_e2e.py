"""A whole GRPO step on one GPU, through `python -m verl.trainer.main_ppo` (Ray, nccl, FSDP2, HF rollout):

    python benchmarks/gpu_e2e.py                          # the default model's shape, random weights, 32 x 4 x 128
    python benchmarks/gpu_e2e.py --model-config .gpu/model  # a folder with config.json + tokenizer (no weights)
    python benchmarks/gpu_e2e.py --cpu-smoke              # the same script on this CPU, tiny shape, to check it runs

The job: a random model of the default model's shape (SmolLM2-135M-Instruct: its config and real tokenizer, weights
drawn from the config, so nothing learns but every shape and kernel is real), the bundled arithmetic prompts,
--prompts prompts x --n responses of --response tokens (a random model seldom samples EOS, so responses run to the
limit), GRPO, one optimizer step per batch, HF rollout through the agent loop (rollout.mode=async, the default).
Micro-batches by token budget (use_dynamic_bsz, --token-budget per GPU), as upstream's GPU examples set them;
everything else is the defaults (bf16, remove padding, gradient checkpointing with its GPU policy).

Figures from the run's metrics.jsonl, the median over the steps after --warmup: step, gen and update_actor seconds,
generated tokens/s, update tokens/s (real tokens of the batch over update seconds) and the in-run actor MFU against
the worker's matmul-peak probe. Without CUDA it prints why it skipped and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
sys.path.insert(0, str(Path(__file__).resolve().parent))
STAGES = ("gen", "old_log_prob", "ref", "reward", "adv", "update_actor")


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model-config", default=None, help="folder with config.json and the tokenizer (default: the "
                   "default model's folder); weights are never read")
    p.add_argument("--prompts", type=int, default=32, help="data.train_batch_size")
    p.add_argument("--n", type=int, default=4, help="rollout.n")
    p.add_argument("--response", type=int, default=128, help="data.max_response_length")
    p.add_argument("--prompt-length", type=int, default=256, help="data.max_prompt_length")
    p.add_argument("--token-budget", type=int, default=16384, help="actor.ppo_max_token_len_per_gpu")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2, help="steps left out of the medians (start-up, allocator)")
    p.add_argument("--out", default=None, help="keep the run's folder and log here (default: a temporary folder)")
    p.add_argument("--cpu-smoke", action="store_true", help="run on this CPU with a tiny shape: checks the script")
    p.add_argument("overrides", nargs="*", help="extra main_ppo overrides, appended last")
    return p.parse_args(argv)


def random_model(config_dir: str, out: Path, shrink: bool) -> Path:
    """A model drawn from ``config_dir``'s config (seed 0) with its tokenizer, saved as an HF folder."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(config_dir)
    if shrink:  # --cpu-smoke: the real tokenizer and vocabulary, 2 small layers
        config.num_hidden_layers, config.hidden_size, config.intermediate_size = 2, 64, 128
        config.num_attention_heads = config.num_key_value_heads = 2
        config.head_dim = 32
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(config_dir).save_pretrained(out)
    return out


def make_data(root: Path, train_size: int) -> Path:
    subprocess.run([PY, str(REPO / "examples/data_preprocess/arithmetic.py"), "--local_save_dir", str(root),
                    "--difficulty", "1", "--train_size", str(train_size), "--test_size", "16", "--seed", "0"],
                   check=True, stdout=subprocess.DEVNULL)
    return root


def overrides(args: argparse.Namespace, model: Path, data: Path, run: Path) -> list[str]:
    arr = "actor_rollout_ref"
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
        f"data.train_batch_size={args.prompts}", f"data.max_prompt_length={args.prompt_length}",
        f"data.max_response_length={args.response}",
        f"{arr}.model.path={model}", f"{arr}.rollout.n={args.n}", f"{arr}.rollout.name=hf",
        f"{arr}.actor.ppo_mini_batch_size={args.prompts}", f"{arr}.actor.use_dynamic_bsz=true",
        f"{arr}.actor.ppo_max_token_len_per_gpu={args.token_budget}",
        f"{arr}.rollout.log_prob_use_dynamic_bsz=true", f"{arr}.ref.log_prob_use_dynamic_bsz=true",
        f"{arr}.rollout.log_prob_max_token_len_per_gpu={2 * args.token_budget}",
        f"{arr}.ref.log_prob_max_token_len_per_gpu={2 * args.token_budget}",
        f"{arr}.actor.optim.lr=1e-6", f"{arr}.actor.use_kl_loss=true",
        # bookkeeping: steps, no validation or checkpoint, where logs go
        "trainer.n_gpus_per_node=1", f"trainer.total_training_steps={args.steps}", "trainer.val_before_train=false",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.resume_mode=disable", "trainer.logger=[console]",
        f"trainer.default_local_dir={run}", "trainer.project_name=gpu_e2e", "trainer.experiment_name=grpo",
        *(["trainer.device=cpu", "ray_kwargs.ray_init.num_cpus=2"] if args.cpu_smoke else []),
        *args.overrides,
    ]


def figures(rows: list[dict], warmup: int) -> dict[str, float]:
    timed = rows[warmup:] or rows[-1:]
    med = lambda key: statistics.median(float(r[key]) for r in timed)  # noqa: E731
    out = {"steps_timed": float(len(timed)), "step_s": med("timing_s/step")}
    for stage in STAGES:
        if all(f"timing_s/{stage}" in r for r in timed):
            out[f"{stage}_s"] = med(f"timing_s/{stage}")
    generated = statistics.median(float(r["response_length/mean"]) * r["_responses"] for r in timed)
    out["gen_tokens_per_s"] = generated / out["gen_s"]
    out["update_tokens_per_s"] = statistics.median(float(r["perf/total_num_tokens"]) for r in timed) / out["update_actor_s"]
    out["mfu_actor"] = med("perf/mfu/actor")
    out["matmul_peak_tflops"] = med("perf/matmul_peak_tflops/actor")
    return out


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    import torch

    if not args.cpu_smoke and not torch.cuda.is_available():
        print("gpu_e2e: skipped (torch sees no CUDA device); run it on a machine with a GPU, or with --cpu-smoke "
              "to check the script here. The CPU figures are benchmarks/vs_trl.py and benchmarks/throughput.py.")
        return 0
    if args.cpu_smoke:
        args.prompts, args.n, args.response, args.steps, args.warmup = 4, 2, 8, 2, 1
    from vs_trl import run_main_ppo

    from verl.utils.default_model import default_model_path

    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu_e2e_"))
    root.mkdir(parents=True, exist_ok=True)
    model = random_model(args.model_config or default_model_path(), root / "model", shrink=args.cpu_smoke)
    data = make_data(root / "data", train_size=args.prompts * args.steps)
    run, log = root / "run", root / "main_ppo.log"
    start = time.time()
    rows = run_main_ppo(overrides(args, model, data, run), run, log, "gpu_e2e")
    for row in rows:
        row["_responses"] = args.prompts * args.n
        stages = " ".join(f"{s}={row[f'timing_s/{s}']:.2f}" for s in STAGES if f"timing_s/{s}" in row)
        print(f"[gpu_e2e] step {row['step']}: {row['timing_s/step']:.2f} s ({stages}); "
              f"mfu/actor {row.get('perf/mfu/actor', float('nan')):.3f}", flush=True)
    device = torch.cuda.get_device_name() if not args.cpu_smoke else "cpu (smoke run)"
    print(f"[gpu_e2e] {len(rows)} steps in {time.time() - start:.0f} s; device: {device}; "
          f"{args.prompts} prompts x {args.n} x {args.response} tokens; log {log}")
    for key, value in figures(rows, args.warmup).items():
        print(f"{key}: {value:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
