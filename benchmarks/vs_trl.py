"""Our GRPO step against TRL's GRPOTrainer on the same job, both measured in this run on this machine:

    .venv/bin/python benchmarks/vs_trl.py                      # ~10-15 min on 2 cores
    .venv/bin/python benchmarks/vs_trl.py --trl-configs all    # also time every TRL candidate (~25 min)

The job: the default model (SmolLM2-135M-Instruct), the bundled arithmetic task at level 1 (prompts as
scripts/demo.sh makes them), 8 prompts x 4 responses per optimizer step, at most 48 response tokens sampled at
temperature 1.0, lr 1e-5, no KL, one policy update per batch, the task's own reward (verl.rewards.arithmetic).

Ours is the command line a user would write: `python -m verl.trainer.main_ppo` with data, model, batch shape,
micro-batch sizes, `rollout.name=vllm`, lr and KL off, and nothing else (no precision, padding, gradient
checkpointing or dynamic-batch key: the defaults decide). TRL runs in the configuration named by --trl-configs;
the default is the one measured fastest here (see docs/performance.md, "Against TRL"). The candidates:
    bf16 / fp32        GRPOConfig(bf16=True) (autocast over fp32 weights, TRL's default) or bf16=False
    _gc                gradient_checkpointing=True (TRL's default); without it, off
    _mb32              one micro-batch of 32 completions instead of 4 accumulated micro-batches of 8
    _vllm              use_vllm=True, vllm_mode="colocate" (generation on vLLM in the trainer's process)
A candidate that fails is reported with its error and left out of the comparison.

Step time: each side runs --steps optimizer steps; the first --warmup are dropped and the median of the rest
counts. Ours from the run's metrics.jsonl (`timing_s/step`); TRL's from a TrainerCallback (on_step_begin to
on_step_end, generation included). The last three lines are `ours_step_s`, `trl_step_s` and `ratio` (ours/trl;
the issue's target is <= 0.5).

TRL is not a dependency of verl and this script installs nothing: without it, it says how to add it and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
BATCH, N, RESPONSE, PROMPT, LR, LEVEL = 8, 4, 48, 256, 1e-5, 1
TRL_PIN = "trl==1.16.0"  # the version measured in docs/performance.md
CANDIDATES = ("bf16", "bf16_gc", "fp32", "fp32_gc", "bf16_mb32", "bf16_vllm")
# TRL's own defaults (bf16 autocast, gradient checkpointing): the fastest candidate on the AVX512-BF16 box, tied with
# "bf16" within noise (docs/performance.md, "Against TRL"); its colocated vLLM fails on CPU (weight sync)
FASTEST = "bf16_gc"


def trl_missing() -> str | None:
    """None when trl imports, else the message to print before skipping."""
    try:
        importlib.import_module("trl")
    except ImportError as exc:
        return (f"vs_trl: skipped: trl is not importable ({exc}). It is not a dependency of verl; add it to this "
                f"venv with `{PY} -m pip install {TRL_PIN}` and run this again.")
    return None


def cpu_flags() -> str:
    """The bf16 flags the figures depend on (what `lscpu | grep -o 'avx512_bf16\\|amx_bf16'` shows)."""
    try:
        words = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    return " ".join(f for f in ("avx512_bf16", "amx_bf16") if f in words) or "none (no native bf16)"


def make_data(root: Path) -> Path:
    data = root / "data"
    subprocess.run([PY, str(REPO / "examples/data_preprocess/arithmetic.py"), "--local_save_dir", str(data),
                    "--difficulty", str(LEVEL), "--train_size", "2048", "--test_size", "64", "--seed", "0"],
                   check=True, stdout=subprocess.DEVNULL)
    return data


def median_after_warmup(step_times: list[float], warmup: int) -> float:
    timed = step_times[warmup:]
    if not timed:
        raise RuntimeError(f"no step left to time: {len(step_times)} steps, {warmup} of them warm-up; raise --steps")
    return statistics.median(timed)


# ---------------------------------------------------------------------------------------------------- ours


def ours_overrides(data: Path, model: str, out: Path, steps: int) -> list[str]:
    """The user's command line: shape, data, model, micro-batches, vLLM, lr, KL off; run bookkeeping."""
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
        f"data.train_batch_size={BATCH}", f"data.max_prompt_length={PROMPT}", f"data.max_response_length={RESPONSE}",
        f"actor_rollout_ref.model.path={model}", f"actor_rollout_ref.rollout.n={N}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        f"actor_rollout_ref.actor.optim.lr={LR}",
        "algorithm.use_kl_in_reward=false", "actor_rollout_ref.actor.use_kl_loss=false",
        # bookkeeping, no effect on a training step: how many steps, no validation or checkpoint, where logs go
        "trainer.n_gpus_per_node=1", f"trainer.total_training_steps={steps}", "trainer.val_before_train=false",
        "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.resume_mode=disable", "trainer.logger=[console]",
        f"trainer.default_local_dir={out}", "trainer.project_name=vs_trl", "trainer.experiment_name=ours",
    ]


def run_main_ppo(overrides: list[str], out: Path, log: Path, label: str) -> list[dict]:
    """`python -m verl.trainer.main_ppo OVERRIDES` with its output in ``log``; the metric rows of its training steps
    (from ``out``/report/metrics.jsonl), in step order. A failed run exits with the log's last lines."""
    cmd = [PY, "-m", "verl.trainer.main_ppo", *overrides]
    print(f"[{label}] " + " ".join(cmd[1:]), flush=True)
    with log.open("w") as fh:
        done = subprocess.run(cmd, cwd=REPO, env={**os.environ, "VERL_PROGRESS": "0"}, stdout=fh,
                              stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise SystemExit(f"[{label}] main_ppo failed (exit {done.returncode}); last lines of {log}:\n{tail(log)}")
    rows = [json.loads(line) for line in (out / "report" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return sorted((r for r in rows if "actor/pg_loss" in r), key=lambda r: r["step"])  # training steps only


def run_ours(data: Path, model: str, root: Path, args: argparse.Namespace) -> dict:
    out, log = root / "ours", root / "ours.log"
    start = time.time()
    rows = run_main_ppo(ours_overrides(data, model, out, args.steps), out, log, "ours")
    steps = [r["timing_s/step"] for r in rows]
    timed = rows[args.warmup:]
    stages = {k.removeprefix("timing_s/"): statistics.mean(r[k] for r in timed)
              for k in sorted(timed[0]) if k.startswith("timing_s/") and k != "timing_s/step"} if timed else {}
    print(f"[ours] {len(steps)} steps in {time.time() - start:.0f}s (log: {log})", flush=True)
    return {"steps": steps, "stages": stages}


# ---------------------------------------------------------------------------------------------------- TRL


def trl_config_kwargs(name: str, steps: int, out: Path) -> dict:
    """GRPOConfig arguments of one candidate: the shared job plus the candidate's speed settings."""
    if name not in CANDIDATES:
        raise SystemExit(f"--trl-configs: unknown candidate {name!r}; choose from {', '.join(CANDIDATES)} or 'all'")
    micro = BATCH * N if "_mb32" in name else 8
    kwargs = dict(
        output_dir=str(out), max_steps=steps, learning_rate=LR, beta=0.0, num_iterations=1,
        num_generations=N, per_device_train_batch_size=micro, gradient_accumulation_steps=BATCH * N // micro,
        max_completion_length=RESPONSE, temperature=1.0, top_p=1.0, top_k=0, lr_scheduler_type="constant",
        bf16=name.startswith("bf16"), gradient_checkpointing="_gc" in name,
        use_cpu=not _cuda(), report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0,
        dataloader_num_workers=0,
    )
    if "_vllm" in name:
        kwargs.update(use_vllm=True, vllm_mode="colocate", vllm_max_model_length=PROMPT + RESPONSE)
    return kwargs


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def trl_child(name: str, data: Path, model: str, out: Path, steps: int) -> None:
    """One TRL candidate in this (child) process; writes its step times to out/steps.json."""
    from datasets import load_dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from verl.rewards.arithmetic import compute_score

    def arithmetic_reward(prompts, completions, reward_model, **kwargs) -> list[float]:
        # TRL passes conversational completions as [{"role": "assistant", "content": ...}] and the dataset's other
        # columns by name; ours scores the decoded response text against reward_model.ground_truth the same way
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [compute_score(t, rm["ground_truth"]) for t, rm in zip(texts, reward_model, strict=True)]

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self._start)
            print(f"[trl {name}] step {len(self.times)}: {self.times[-1]:.2f}s", flush=True)

    dataset = load_dataset("parquet", data_files=str(data / "train.parquet"), split="train")
    dataset = dataset.select_columns(["prompt", "reward_model"])
    timer = StepTimer()
    config = GRPOConfig(**trl_config_kwargs(name, steps, out))
    trainer = GRPOTrainer(model=model, reward_funcs=[arithmetic_reward], args=config, train_dataset=dataset,
                          callbacks=[timer])
    trainer.train()
    (out / "steps.json").write_text(json.dumps(timer.times))


def run_trl(name: str, data: Path, model: str, root: Path, args: argparse.Namespace) -> dict:
    out = root / f"trl_{name}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "steps.json").unlink(missing_ok=True)
    log = root / f"trl_{name}.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    cmd = [PY, str(Path(__file__).resolve()), "--trl-child", name, "--data", str(data), "--model", model,
           "--out", str(out), "--steps", str(args.steps)]
    print(f"[trl {name}] running (log: {log})", flush=True)
    start = time.time()
    with log.open("w") as fh:
        done = subprocess.run(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT)
    if done.returncode != 0 or not (out / "steps.json").exists():
        error = next((line for line in reversed(tail(log, 40).splitlines()) if "Error" in line), tail(log, 1))
        print(f"[trl {name}] failed (exit {done.returncode}): {error.strip()}", flush=True)
        return {"steps": [], "error": error.strip()}
    steps = json.loads((out / "steps.json").read_text())
    print(f"[trl {name}] {len(steps)} steps in {time.time() - start:.0f}s", flush=True)
    return {"steps": steps}


def tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# ---------------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5, help="optimizer steps per side, warm-up included")
    p.add_argument("--warmup", type=int, default=1, help="first steps left out of the median")
    p.add_argument("--trl-configs", default=FASTEST,
                   help=f"comma-separated TRL candidates ({', '.join(CANDIDATES)}) or 'all'; the fastest counts")
    p.add_argument("--skip-ours", action="store_true", help="time the TRL candidates only (no ratio)")
    p.add_argument("--model", default=None, help="HF folder (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--out", default="/tmp/bench_vs_trl")
    p.add_argument("--data", default=None, help=argparse.SUPPRESS)  # for --trl-child
    p.add_argument("--trl-child", default=None, help=argparse.SUPPRESS)  # run one TRL candidate in this process
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = trl_missing()
    if missing:
        print(missing, flush=True)
        return 0
    if args.trl_child:
        trl_child(args.trl_child, Path(args.data), args.model, Path(args.out), args.steps)
        return 0
    names = list(CANDIDATES) if args.trl_configs == "all" else [c.strip() for c in args.trl_configs.split(",")]
    for name in names:
        trl_config_kwargs(name, args.steps, Path(args.out))  # an unknown name fails before anything runs
    import trl

    root = Path(args.out)
    root.mkdir(parents=True, exist_ok=True)
    model = args.model or subprocess.run([PY, "-m", "verl.utils.default_model", "--quiet"], check=True, cwd=REPO,
                                         capture_output=True, text=True).stdout.strip()
    data = make_data(root)
    print(f"cpu_flags: {cpu_flags()}; trl {trl.__version__}; model {model}; {BATCH} prompts x {N} responses x "
          f"<= {RESPONSE} tokens, {args.steps} steps each, first {args.warmup} not timed", flush=True)
    ours = None if args.skip_ours else run_ours(data, model, root, args)
    trl_runs = {name: run_trl(name, data, model, root, args) for name in names}

    for name, run in trl_runs.items():
        if run["steps"]:
            print(f"trl[{name}]_step_s: {median_after_warmup(run['steps'], args.warmup):.2f} "
                  f"(steps: {', '.join(f'{s:.1f}' for s in run['steps'])})")
        else:
            print(f"trl[{name}]: failed: {run['error']}")
    timed = {n: median_after_warmup(r["steps"], args.warmup) for n, r in trl_runs.items() if r["steps"]}
    if ours:
        print(f"ours_steps: {', '.join(f'{s:.1f}' for s in ours['steps'])}")
        print("ours_stage_means_s: " + ", ".join(f"{k} {v:.2f}" for k, v in ours["stages"].items()))
    if not timed:
        raise SystemExit("no TRL candidate finished: see the logs above")
    best = min(timed, key=timed.get)
    print(f"trl_config: {best}")
    print(f"cpu_flags: {cpu_flags()}")
    if ours:
        ours_s = median_after_warmup(ours["steps"], args.warmup)
        print(f"ours_step_s: {ours_s:.2f}")
    print(f"trl_step_s: {timed[best]:.2f}")
    if ours:
        print(f"ratio: {ours_s / timed[best]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
