"""SFT then GRPO on the bundled arithmetic task, against GRPO from the base model.

    .venv/bin/python benchmarks/sft_then_rl.py     # defaults: sized for about 25 minutes on an idle 2-core CPU
    .venv/bin/python benchmarks/sft_then_rl.py --grpo_steps 2 --grpo_batch_size 2 --grpo_train_size 32 \
        --eval_size 16 --response_length 40                   # smaller: what was measured below

Measured with the second command (then with one 10% LR-warmup SFT step, now 0), on a 2-core CPU shared with
other jobs (load average 6-10), 32 minutes in all (SFT 19 of them):
    base_model/pass@1: 0.0            sft_model/pass@1: 0.9375
    grpo_from_base/val_acc@step2: 0.0 grpo_from_sft/val_acc@step2: 0.9375
The SFT loss falls from 2.6 to 0.03 in 12 steps of 16 worked solutions; the base model answers in prose and never
writes the `#### <n>` line the strict reward needs, so GRPO from it sees no reward at all.

Stages, each a real command line (subprocess), run on the default model (SmolLM2-135M-Instruct) unless --model:
  1. data      examples/data_preprocess/arithmetic.py (RL prompts; its test split is the evaluation set) and
               arithmetic_sft.py (worked solutions, never a question of the evaluation set)
  2. sft       python -m verl.trainer.fsdp_sft_trainer            -> <work_dir>/sft/global_step_<sft_steps>
  3. eval      python -m verl.trainer.main_generation + main_eval  (greedy) for the base and the SFT model
  4. grpo      python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo from each model, validated at the last
               step on the same evaluation set (val-core/arithmetic/reward/mean@1 from the run's summary.json)

Every figure is printed as a line `name: value`; the two claims are printed as `claim/...: true|false`, and the
exit status is 1 when one fails. Results also go to <work_dir>/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
METRIC = "val-core/arithmetic/reward/mean@1"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work_dir", default="/tmp/verl_bench_sft_then_rl")
    p.add_argument("--model", default=None, help="HF model folder (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--difficulty", type=int, default=1, help="arithmetic level (see arithmetic.py)")
    p.add_argument("--fewshot", action="store_true", help="keep the worked example in the prompt (longer, slower)")
    p.add_argument("--eval_size", type=int, default=32, help="evaluation prompts (main_eval and GRPO validation)")
    p.add_argument("--response_length", type=int, default=48)
    p.add_argument("--sft_train_size", type=int, default=256)
    p.add_argument("--sft_steps", type=int, default=12)
    p.add_argument("--sft_batch_size", type=int, default=16)
    p.add_argument("--sft_micro_batch_size", type=int, default=8)
    p.add_argument("--sft_lr", type=float, default=3e-5)
    p.add_argument("--grpo_train_size", type=int, default=64)
    p.add_argument("--grpo_steps", type=int, default=3)
    p.add_argument("--grpo_batch_size", type=int, default=4, help="prompts per GRPO step")
    p.add_argument("--grpo_n", type=int, default=4, help="responses per prompt")
    p.add_argument("--grpo_lr", type=float, default=2e-6)
    p.add_argument("--timeout_min", type=float, default=60, help="per stage")
    return p.parse_args(argv)


def run(stage: str, cmd: list[str], log_dir: Path, timeout_s: float) -> float:
    """Run one stage with its output in <log_dir>/<stage>.log; returns its wall time. Fails loudly."""
    log = log_dir / f"{stage}.log"
    start = time.time()
    print(f"[{stage}] {' '.join(cmd[:3])} ... (log: {log})", file=sys.stderr, flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    with open(log, "w") as out:
        out.write(" ".join(cmd) + "\n\n")
        out.flush()
        done = subprocess.run(cmd, cwd=str(log_dir), stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout_s)
    if done.returncode != 0:
        tail = log.read_text().splitlines()[-25:]
        raise SystemExit(f"[{stage}] failed with exit code {done.returncode}; last lines of {log}:\n" + "\n".join(tail))
    return time.time() - start


def make_data(args, work: Path, timeout_s: float) -> tuple[Path, Path]:
    rl, sft = work / "data" / "rl", work / "data" / "sft"
    shot = [] if args.fewshot else ["--no_fewshot"]
    run("data_rl", [PY, str(ROOT / "examples/data_preprocess/arithmetic.py"), "--local_save_dir", str(rl),
                    "--difficulty", str(args.difficulty), "--train_size", str(args.grpo_train_size),
                    "--test_size", str(args.eval_size), *shot], work, timeout_s)
    run("data_sft", [PY, str(ROOT / "examples/data_preprocess/arithmetic_sft.py"), "--local_save_dir", str(sft),
                     "--difficulty", str(args.difficulty), "--train_size", str(args.sft_train_size),
                     "--test_size", "32", "--exclude_questions_from", str(rl / "test.parquet"), *shot], work, timeout_s)
    return rl, sft


def prompt_length(args) -> int:
    return 256 if args.fewshot else 128


def sft(args, work: Path, sft_data: Path, timeout_s: float) -> tuple[str, float]:
    out = work / "sft"
    cmd = [PY, "-m", "verl.trainer.fsdp_sft_trainer",
           f"data.train_files={sft_data / 'train.parquet'}", f"data.val_files={sft_data / 'test.parquet'}",
           "data.prompt_key=prompt", "data.response_key=response",
           f"data.max_length={prompt_length(args) + args.response_length}", "data.truncation=left",
           f"data.train_batch_size={args.sft_batch_size}", f"data.micro_batch_size_per_gpu={args.sft_micro_batch_size}",
           f"model.partial_pretrain={args.model or 'null'}", "model.enable_gradient_checkpointing=false",
           "use_remove_padding=true", f"optim.lr={args.sft_lr}", "optim.warmup_steps_ratio=0",
           f"trainer.total_training_steps={args.sft_steps}", "trainer.total_epochs=100", "trainer.save_freq=-1",
           "trainer.test_freq=-1", f"trainer.default_local_dir={out}", "trainer.resume_mode=disable",
           "trainer.logger=[console]"]
    seconds = run("sft", cmd, work, timeout_s)
    return str(out / f"global_step_{args.sft_steps}"), seconds


def evaluate(name: str, model: str | None, args, work: Path, test: Path, timeout_s: float) -> tuple[float, float]:
    """Greedy pass@1 of a model on the evaluation set, through main_generation and main_eval."""
    gen, report = work / "eval" / f"{name}.parquet", work / "eval" / f"{name}.json"
    seconds = run(f"generate_{name}", [
        PY, "-m", "verl.trainer.main_generation", f"model.path={model or 'null'}", f"data.path={test}",
        f"data.output_path={gen}", "data.n_samples=1", f"data.batch_size={args.eval_size}",
        "rollout.name=hf", "rollout.do_sample=false", "rollout.temperature=0",
        f"rollout.prompt_length={prompt_length(args)}", f"rollout.response_length={args.response_length}"],
        work, timeout_s)
    seconds += run(f"eval_{name}", [PY, "-m", "verl.trainer.main_eval", f"data.path={gen}",
                                    f"data.output_path={report}"], work, timeout_s)
    return json.loads(report.read_text())["per_data_source"]["arithmetic"]["pass@1"], seconds


def grpo(name: str, model: str | None, args, work: Path, rl: Path, timeout_s: float) -> tuple[float, float]:
    """GRPO for grpo_steps; the validation accuracy at the last step."""
    out = work / f"grpo_{name}"
    batch = args.grpo_batch_size
    cmd = [PY, "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=grpo",
           f"data.train_files={rl / 'train.parquet'}", f"data.val_files={rl / 'test.parquet'}",
           f"data.train_batch_size={batch}", f"data.max_prompt_length={prompt_length(args)}",
           f"data.max_response_length={args.response_length}",
           f"actor_rollout_ref.model.path={model or 'null'}",
           "actor_rollout_ref.model.enable_gradient_checkpointing=false",
           f"actor_rollout_ref.actor.optim.lr={args.grpo_lr}",
           f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
           "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
           "actor_rollout_ref.actor.use_kl_loss=false",
           "actor_rollout_ref.rollout.name=hf", f"actor_rollout_ref.rollout.n={args.grpo_n}",
           "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
           "trainer.n_gpus_per_node=1", "trainer.nnodes=1", f"trainer.total_training_steps={args.grpo_steps}",
           f"trainer.test_freq={args.grpo_steps}", "trainer.val_before_train=false", "trainer.save_freq=-1",
           "trainer.logger=[console]", f"trainer.default_local_dir={out}", f"trainer.report_dir={out / 'report'}",
           "trainer.project_name=sft_then_rl", f"trainer.experiment_name=grpo_from_{name}"]
    seconds = run(f"grpo_{name}", cmd, work, timeout_s)
    summary = json.loads((out / "report" / "summary.json").read_text())
    stats = summary["validation"].get(METRIC)
    if stats is None or stats["last_step"] != args.grpo_steps:
        raise SystemExit(f"[grpo_{name}] no {METRIC} at step {args.grpo_steps} in {out / 'report' / 'summary.json'}")
    return float(stats["last"]), seconds


def main(argv=None) -> int:
    args = parse_args(argv)
    work = Path(args.work_dir).expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    timeout_s = args.timeout_min * 60
    start = time.time()
    results: dict[str, float | bool] = {}
    rl, sft_data = make_data(args, work, timeout_s)
    sft_model, results["time/sft_s"] = sft(args, work, sft_data, timeout_s)
    test = rl / "test.parquet"
    results["base_model/pass@1"], results["time/eval_base_s"] = evaluate("base", args.model, args, work, test, timeout_s)
    results["sft_model/pass@1"], results["time/eval_sft_s"] = evaluate("sft", sft_model, args, work, test, timeout_s)
    step = args.grpo_steps
    results[f"grpo_from_base/val_acc@step{step}"], results["time/grpo_base_s"] = grpo("base", args.model, args, work,
                                                                                      rl, timeout_s)
    results[f"grpo_from_sft/val_acc@step{step}"], results["time/grpo_sft_s"] = grpo("sft", sft_model, args, work,
                                                                                    rl, timeout_s)
    results["claim/sft_model_beats_base_model"] = results["sft_model/pass@1"] > results["base_model/pass@1"]
    results["claim/grpo_from_sft_beats_grpo_from_base"] = (results[f"grpo_from_sft/val_acc@step{step}"]
                                                           > results[f"grpo_from_base/val_acc@step{step}"])
    results["time/total_s"] = time.time() - start
    results["eval_prompts"] = args.eval_size
    for name, value in results.items():
        print(f"{name}: {str(value).lower() if isinstance(value, bool) else round(value, 4)}")
    (work / "results.json").write_text(json.dumps({**results, "args": vars(args)}, indent=2))
    return 0 if all(v for k, v in results.items() if k.startswith("claim/")) else 1


if __name__ == "__main__":
    sys.exit(main())
