"""Does each algorithm learn? GRPO, PPO (critic + GAE), RLOO and REINFORCE++ on the bundled arithmetic task,
from the default model, each printing its validation accuracy before and after training:

    <algo>_acc_step0: x
    <algo>_acc_stepN: y

    .venv/bin/python benchmarks/learning.py                      # all four, 12 steps: 1-2.5 h on 2 cores
    .venv/bin/python benchmarks/learning.py --algos grpo --steps 6

Each run is `python -m verl.trainer.main_ppo` with upstream-style overrides; the numbers are read back from the
run report (metrics.jsonl). Validation is greedy (val_kwargs), so step 0 is the same model for every algorithm.
Rollout is vLLM when it is installed (as `make setup` does), else HF generate (`--rollout hf` forces it).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

from verl.utils.device import preferred_low_precision

REPO = Path(__file__).resolve().parents[1]
VAL_KEY = "val-core/arithmetic/reward/mean@1"
# bf16 where the CPU has it natively (AVX512-BF16/AMX: ~1.8x on the update), fp32 where bf16 would be emulated
PRECISION = preferred_low_precision()

ALGOS = {
    "grpo": ["algorithm.adv_estimator=grpo"],
    "ppo": ["algorithm.adv_estimator=gae", "critic.optim.lr=1e-5", "critic.ppo_micro_batch_size_per_gpu=16",
            f"critic.model.fsdp_config.mixed_precision.param_dtype={PRECISION}", "critic.model.use_remove_padding=true"],
    "rloo": ["algorithm.adv_estimator=rloo"],
    "reinforce_plus_plus": ["algorithm.adv_estimator=reinforce_plus_plus"],
}


def common_overrides(data: Path, out: Path, args: argparse.Namespace) -> list[str]:
    return [
        f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
        f"data.train_batch_size={args.batch}", "data.max_prompt_length=256", f"data.max_response_length={args.response_length}",
        f"actor_rollout_ref.rollout.n={args.n}", f"actor_rollout_ref.rollout.temperature={args.temperature}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={min(8, args.batch * args.n)}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.batch * args.n}",
        # as the demo: pack the real tokens; budgets that hold what the padded micro-batches would
        "actor_rollout_ref.model.use_remove_padding=true", "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu="
        f"{min(8, args.batch * args.n) * (256 + args.response_length)}",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={args.batch * args.n * (256 + args.response_length)}",
        f"actor_rollout_ref.actor.optim.lr={args.lr}",
        f"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype={PRECISION}",
        f"actor_rollout_ref.rollout.name={args.rollout}",
        f"actor_rollout_ref.rollout.dtype={PRECISION}",
        *(["actor_rollout_ref.rollout.max_num_seqs=64"] if args.rollout == "vllm" else []),
        "trainer.n_gpus_per_node=1", f"trainer.total_training_steps={args.steps}", f"trainer.test_freq={args.steps}",
        "trainer.logger=[console]", f"trainer.default_local_dir={out}", "trainer.project_name=learning_bench",
    ]


def run(algo: str, data: Path, root: Path, args: argparse.Namespace) -> tuple[float, float, float]:
    out = root / algo
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *common_overrides(data, out, args), *ALGOS[algo]]
    start = time.time()
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL if args.quiet else None)
    rows = [json.loads(line) for line in (out / "report" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    vals = {r["step"]: r[VAL_KEY] for r in rows if VAL_KEY in r}
    return vals[0], vals[max(vals)], time.time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", default=",".join(ALGOS))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8, help="prompts per step")
    parser.add_argument("--n", type=int, default=4, help="responses per prompt")
    parser.add_argument("--response_length", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--difficulty", type=int, default=1)
    parser.add_argument("--val_size", type=int, default=64)
    parser.add_argument("--rollout", choices=["vllm", "hf"],
                        default="vllm" if importlib.util.find_spec("vllm") else "hf")
    parser.add_argument("--out", default=str(REPO / "outputs" / "bench_learning"))
    parser.add_argument("--quiet", action="store_true", help="hide the runs' own step logs")
    args = parser.parse_args()
    root = Path(args.out)
    data = root / "data"
    subprocess.run([sys.executable, str(REPO / "examples/data_preprocess/arithmetic.py"), "--local_save_dir", str(data),
                    "--difficulty", str(args.difficulty), "--train_size", "2048", "--test_size", str(args.val_size),
                    "--seed", "0"], check=True)
    for algo in args.algos.split(","):
        if algo not in ALGOS:
            sys.exit(f"unknown algo {algo!r}; choose from {sorted(ALGOS)}")
        before, after, seconds = run(algo, data, root, args)
        print(f"{algo}_acc_step0: {before:.4f}")
        print(f"{algo}_acc_step{args.steps}: {after:.4f}")
        print(f"{algo}_wall_s: {seconds:.0f}", flush=True)


if __name__ == "__main__":
    main()
