"""DAPO (dynamic sampling, clip-higher, overlong buffer) against plain GRPO at equal wall time, on the bundled
arithmetic task with the default model. One run of this script trains both and prints, as a ratio, the greedy
validation accuracy each reached within the same training wall-clock budget:

    .venv/bin/python benchmarks/dapo_vs_grpo.py              # ~15 min on 2 cores (AVX512-BF16, vLLM rollout)

Both arms share everything else: 8 prompts x 4 responses per optimizer step, lr 1e-5, 48 response tokens, the
same data and seed, validation (64 prompts, greedy) every `--val_every` steps. DAPO's steps cost more (each
generates data.gen_batch_size = 3 x 8 prompts per round, and may take several rounds), so each arm is given its
own step count and the comparison is made at the budget B = the shorter arm's total training time (the sum of
its timing_s/step, startup and validation excluded): each arm's score is its last validation at or before B.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from verl.utils.device import preferred_low_precision

REPO = Path(__file__).resolve().parents[1]
VAL_KEY = "val-core/arithmetic/reward/mean@1"
PRECISION = preferred_low_precision()  # bf16 where the CPU has it natively, fp32 where it would be emulated
BATCH, N, RESPONSE, PROMPT = 8, 4, 48, 256

ARMS = {
    "grpo": [],
    # upstream's DAPO recipe keys (examples/dapo/run_dapo_smollm2.sh)
    "dapo": ["actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.28",
             "actor_rollout_ref.actor.clip_ratio_c=10.0", f"data.gen_batch_size={3 * BATCH}",
             "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=acc",
             "algorithm.filter_groups.max_num_gen_batches=10", "reward_model.reward_manager=dapo",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.len=16",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0",
             "+reward_model.reward_kwargs.overlong_buffer_cfg.log=False",
             f"+reward_model.reward_kwargs.max_resp_len={RESPONSE}"],
}


def overrides(data: Path, out: Path, steps: int, args: argparse.Namespace) -> list[str]:
    tokens = PROMPT + RESPONSE
    return [
        f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
        f"data.train_batch_size={BATCH}", f"data.max_prompt_length={PROMPT}", f"data.max_response_length={RESPONSE}",
        "algorithm.adv_estimator=grpo", f"actor_rollout_ref.rollout.n={N}", "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.model.use_remove_padding=true", "actor_rollout_ref.actor.use_dynamic_bsz=true",
        f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={8 * tokens}",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={32 * tokens}",
        "actor_rollout_ref.actor.optim.lr=1e-5", f"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype={PRECISION}",
        f"actor_rollout_ref.rollout.name={args.rollout}", f"actor_rollout_ref.rollout.dtype={PRECISION}",
        *(["actor_rollout_ref.rollout.max_num_seqs=96"] if args.rollout == "vllm" else []),
        "trainer.n_gpus_per_node=1", f"trainer.total_training_steps={steps}", f"trainer.test_freq={args.val_every}",
        "trainer.val_before_train=true", "trainer.save_freq=-1", "trainer.resume_mode=disable",
        "trainer.logger=[console]", f"trainer.default_local_dir={out}", "trainer.project_name=dapo_vs_grpo",
    ]


def run(arm: str, steps: int, data: Path, root: Path, args: argparse.Namespace) -> list[dict]:
    out = root / arm
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides(data, out, steps, args), *ARMS[arm]]
    start = time.time()
    env = {**os.environ, "VERL_PROGRESS": "0"}
    subprocess.run(cmd, check=True, cwd=REPO, env=env, stdout=subprocess.DEVNULL if args.quiet else None)
    print(f"[{arm}] {steps} steps in {time.time() - start:.0f}s", flush=True)
    return [json.loads(line) for line in (out / "report" / "metrics.jsonl").read_text().splitlines() if line.strip()]


def curve(rows: list[dict]) -> list[tuple[float, int, float]]:
    """(training seconds so far, step, validation accuracy) at every validation, step 0 at 0 s."""
    points, elapsed = [], 0.0
    for row in sorted(rows, key=lambda r: r["step"]):
        elapsed += row.get("timing_s/step", 0.0)
        if VAL_KEY in row:
            points.append((elapsed, row["step"], row[VAL_KEY]))
    return points


def at_budget(points: list[tuple[float, int, float]], budget: float) -> tuple[float, int, float]:
    return [p for p in points if p[0] <= budget + 1e-6][-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grpo_steps", type=int, default=12)
    parser.add_argument("--dapo_steps", type=int, default=8)
    parser.add_argument("--val_every", type=int, default=2)
    parser.add_argument("--difficulty", type=int, default=1)
    parser.add_argument("--rollout", choices=["vllm", "hf"], default="vllm" if importlib.util.find_spec("vllm") else "hf")
    parser.add_argument("--out", default="/tmp/bench_dapo_vs_grpo")
    parser.add_argument("--quiet", action="store_true", help="hide the runs' own step logs")
    args = parser.parse_args()
    root = Path(args.out)
    data = root / "data"
    subprocess.run([sys.executable, str(REPO / "examples/data_preprocess/arithmetic.py"), "--local_save_dir", str(data),
                    "--difficulty", str(args.difficulty), "--train_size", "2048", "--test_size", "64", "--seed", "0"],
                   check=True, stdout=subprocess.DEVNULL)
    rows = {"grpo": run("grpo", args.grpo_steps, data, root, args), "dapo": run("dapo", args.dapo_steps, data, root, args)}
    points = {arm: curve(r) for arm, r in rows.items()}
    budget = min(points[arm][-1][0] for arm in points)
    print(f"budget_s (the shorter arm's training time): {budget:.0f}")
    score = {}
    for arm, arm_rows in rows.items():
        steps = [r for r in arm_rows if "timing_s/step" in r]
        sec, step, acc = at_budget(points[arm], budget)
        score[arm] = acc
        print(f"{arm}: step0 {points[arm][0][2]:.4f}; at budget: step {step} ({sec:.0f}s) val {acc:.4f}; "
              f"final step {points[arm][-1][1]} val {points[arm][-1][2]:.4f}; "
              f"{sum(r['timing_s/step'] for r in steps) / len(steps):.1f} s/step")
        if arm == "dapo":
            gens = [r["train/num_gen_batches"] for r in steps]
            kept = [r["train/kept_group_ratio"] for r in steps]
            print(f"dapo: generation rounds per step {gens}; kept group ratio mean {sum(kept) / len(kept):.2f}")
    ratio = score["dapo"] / score["grpo"] if score["grpo"] > 0 else float("inf")
    print(f"dapo_over_grpo_val_at_equal_wall_time: {ratio:.3f} ({score['dapo']:.4f} / {score['grpo']:.4f})")


if __name__ == "__main__":
    main()
