"""Does agentic RL learn? The bundled tool task (multiplication with a Python tool) on the default model:
the base model without the tool, an SFT cold start on tool-use traces, then GRPO through the agent loop.

    .venv/bin/python benchmarks/agent_learning.py            # defaults: about 25 minutes on an idle 2-core CPU

Prints, last (each `name: value`):
    base_accuracy: W               the base model, no tool, greedy (main_generation + main_eval)
    tool_task_accuracy_before: X   the SFT checkpoint with the tool, greedy (GRPO's validation at step 0)
    tool_task_accuracy_after: Y    after GRPO, greedy (GRPO's validation at its last step)
    tool_calls_per_sample: Z       tool calls per validation sample after GRPO (agent-loop metric)

Stages, each a real command line (subprocess; logs in <work_dir>/<stage>.log), see docs/agent_learning.md:
  1. data   examples/data_preprocess/tool_arithmetic.py (tool rows; --no_tool: the same questions without the tool)
            and tool_arithmetic_sft.py (tool-use traces, never a question of the evaluation set)
  2. base   python -m verl.trainer.main_generation (vLLM, greedy) + main_eval on the no-tool questions
  3. sft    python -m verl.trainer.fsdp_sft_trainer, multi-turn, data.chat_template=verl_hermes
  4. grpo   python -m verl.trainer.main_ppo algorithm.adv_estimator=grpo, rollout.mode=async with
            multi_turn.enable=True and examples/tool_arithmetic/code_interpreter_tool_config.yaml (the trainer starts
            the local sandbox), validated before training and at the last step (val-core/arithmetic/reward/mean@1
            from the run's metrics.jsonl). --grpo_steps 0 runs validation only (trainer.val_only=True).
Results also go to <work_dir>/results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from sft_then_rl import run  # benchmarks/ is on sys.path when this file is run as a script

from verl.utils.device import preferred_low_precision

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
VAL_KEY = "val-core/arithmetic/reward/mean@1"
TOOL_CONFIG = ROOT / "examples/tool_arithmetic/code_interpreter_tool_config.yaml"
PRECISION = preferred_low_precision()
PROMPT_LENGTH = 320  # the system turn with the tool schema is ~250 tokens
# The response holds every turn after the prompt: the tool call (~30 tokens), the tool response (~15), the answer.
RESPONSE_LENGTH = 128


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work_dir", default="/tmp/verl_bench_agent_learning")
    p.add_argument("--model", default=None, help="HF model folder (default: the bundled SmolLM2-135M-Instruct)")
    p.add_argument("--a_digits", default="3")
    p.add_argument("--b_digits", default="2,3")
    p.add_argument("--eval_size", type=int, default=64, help="evaluation questions (all accuracies)")
    p.add_argument("--sft_train_size", type=int, default=64)
    p.add_argument("--sft_steps", type=int, default=4)
    p.add_argument("--sft_batch_size", type=int, default=16)
    p.add_argument("--sft_lr", type=float, default=2e-5)
    p.add_argument("--sft_model", default=None, help="an SFT checkpoint (HF folder) to start GRPO from; skips SFT")
    p.add_argument("--grpo_train_size", type=int, default=512)
    p.add_argument("--grpo_steps", type=int, default=5, help="0: validation only")
    p.add_argument("--grpo_batch_size", type=int, default=8, help="prompts per GRPO step")
    p.add_argument("--grpo_n", type=int, default=4, help="responses per prompt")
    p.add_argument("--grpo_lr", type=float, default=2e-5)
    p.add_argument("--temperature", type=float, default=0.7, help="GRPO rollout temperature")
    p.add_argument("--max_assistant_turns", type=int, default=3)
    p.add_argument("--tool_calls_metric", default="agent/tool_calls/mean",
                   help="the agent loop's tool-call count per sample (its val- prefixed form is preferred)")
    p.add_argument("--timeout_min", type=float, default=40, help="per stage")
    return p.parse_args(argv)


def make_data(args, work: Path, timeout_s: float) -> tuple[Path, Path, Path]:
    script = ROOT / "examples/data_preprocess"
    rl, no_tool, sft = work / "data" / "rl", work / "data" / "no_tool", work / "data" / "sft"
    sizes = ["--train_size", str(args.grpo_train_size), "--test_size", str(args.eval_size), "--seed", "0",
             "--a_digits", args.a_digits, "--b_digits", args.b_digits]
    run("data_rl", [PY, str(script / "tool_arithmetic.py"), "--local_dir", str(rl), *sizes], work, timeout_s)
    # the same seed and sizes give the same questions: only the prompt differs
    run("data_no_tool", [PY, str(script / "tool_arithmetic.py"), "--local_dir", str(no_tool), "--no_tool", *sizes],
        work, timeout_s)
    run("data_sft", [PY, str(script / "tool_arithmetic_sft.py"), "--local_dir", str(sft),
                     "--train_size", str(args.sft_train_size), "--test_size", "8", "--seed", "1000",
                     "--a_digits", args.a_digits, "--b_digits", args.b_digits,
                     "--exclude_questions_from", str(rl / "test.parquet")], work, timeout_s)
    return rl, no_tool, sft


def base_accuracy(args, work: Path, test: Path, timeout_s: float) -> float:
    """Greedy pass@1 of the base model without the tool (main_generation on vLLM, then main_eval)."""
    gen, report = work / "eval" / "base.parquet", work / "eval" / "base.json"
    gen.parent.mkdir(parents=True, exist_ok=True)
    run("generate_base", [
        PY, "-m", "verl.trainer.main_generation", f"model.path={args.model or 'null'}", f"data.path={test}",
        f"data.output_path={gen}", "data.n_samples=1", f"data.batch_size={args.eval_size}",
        "rollout.name=vllm", f"rollout.dtype={PRECISION}", "rollout.do_sample=false", "rollout.temperature=0",
        f"rollout.prompt_length={PROMPT_LENGTH}", f"rollout.response_length={RESPONSE_LENGTH}"], work, timeout_s)
    run("eval_base", [PY, "-m", "verl.trainer.main_eval", f"data.path={gen}", f"data.output_path={report}"],
        work, timeout_s)
    return float(json.loads(report.read_text())["per_data_source"]["arithmetic"]["pass@1"])


def sft_command(args, sft_data: Path, out: Path) -> list[str]:
    return [PY, "-m", "verl.trainer.fsdp_sft_trainer",
            "data.multiturn.enable=true", "data.multiturn.messages_key=messages", "data.multiturn.tools_key=tools",
            "data.chat_template=verl_hermes",
            f"data.train_files={sft_data / 'train.parquet'}", "data.val_files=null",
            f"data.max_length={PROMPT_LENGTH + RESPONSE_LENGTH}", "data.truncation=error",
            f"data.train_batch_size={args.sft_batch_size}", f"data.micro_batch_size_per_gpu={args.sft_batch_size}",
            f"model.partial_pretrain={args.model or 'null'}", "model.enable_gradient_checkpointing=false",
            f"model.fsdp_config.mixed_precision.param_dtype={PRECISION}", "use_remove_padding=true",
            f"optim.lr={args.sft_lr}", "optim.warmup_steps_ratio=0", "optim.lr_scheduler=constant",
            f"trainer.total_training_steps={args.sft_steps}", "trainer.total_epochs=100", "trainer.save_freq=-1",
            "trainer.checkpoint.save_contents=[model]", "trainer.test_freq=-1", f"trainer.default_local_dir={out}",
            "trainer.resume_mode=disable", "trainer.logger=[console]"]


def grpo_command(args, model: str, rl: Path, out: Path) -> list[str]:
    batch, n = args.grpo_batch_size, args.grpo_n
    seq = PROMPT_LENGTH + RESPONSE_LENGTH
    steps = ["trainer.val_only=True", "trainer.total_training_steps=1"] if args.grpo_steps == 0 else \
        [f"trainer.total_training_steps={args.grpo_steps}", f"trainer.test_freq={args.grpo_steps}"]
    return [PY, "-m", "verl.trainer.main_ppo", "algorithm.adv_estimator=grpo",
            f"data.train_files={rl / 'train.parquet'}", f"data.val_files={rl / 'test.parquet'}",
            f"data.train_batch_size={batch}", f"data.max_prompt_length={PROMPT_LENGTH}",
            f"data.max_response_length={RESPONSE_LENGTH}", "data.return_raw_chat=True",
            f"actor_rollout_ref.model.path={model}", "actor_rollout_ref.model.use_remove_padding=true",
            "actor_rollout_ref.model.enable_gradient_checkpointing=false",
            f"actor_rollout_ref.actor.optim.lr={args.grpo_lr}", "actor_rollout_ref.actor.use_kl_loss=false",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
            "actor_rollout_ref.actor.use_dynamic_bsz=true", f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={8 * seq}",
            f"actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype={PRECISION}",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={batch * n * seq}",
            "actor_rollout_ref.rollout.name=vllm", f"actor_rollout_ref.rollout.dtype={PRECISION}",
            "actor_rollout_ref.rollout.max_num_seqs=64", f"actor_rollout_ref.rollout.n={n}",
            f"actor_rollout_ref.rollout.temperature={args.temperature}",
            "actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.multi_turn.enable=True",
            f"actor_rollout_ref.rollout.multi_turn.tool_config_path={TOOL_CONFIG}",
            f"actor_rollout_ref.rollout.multi_turn.max_assistant_turns={args.max_assistant_turns}",
            "actor_rollout_ref.rollout.multi_turn.chat_template=verl_hermes",
            "trainer.n_gpus_per_node=1", "trainer.nnodes=1", *steps, "trainer.val_before_train=True",
            "trainer.save_freq=-1", "trainer.logger=[console]", f"trainer.default_local_dir={out}",
            "trainer.project_name=agent_learning", "trainer.experiment_name=grpo_tool_arithmetic"]


def read_metrics(out: Path) -> list[dict]:
    path = out / "report" / "metrics.jsonl"
    if not path.exists():
        raise SystemExit(f"no run report at {path}: did the GRPO run log with trainer.report_dir?")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def last_value(rows: list[dict], keys: list[str]) -> float | None:
    """The value at the latest step of the first key that any row has."""
    for key in keys:
        hits = [(row.get("step", 0), row[key]) for row in rows if key in row]
        if hits:
            return float(max(hits, key=lambda hit: hit[0])[1])
    return None


def grpo(args, model: str, rl: Path, work: Path, timeout_s: float) -> dict[str, float]:
    out = work / "grpo"
    run("grpo", grpo_command(args, model, rl, out), work, timeout_s)
    rows = read_metrics(out)
    vals = {row["step"]: row[VAL_KEY] for row in rows if VAL_KEY in row}
    if not vals:
        raise SystemExit(f"[grpo] no {VAL_KEY} in {out / 'report' / 'metrics.jsonl'}")
    calls_key = args.tool_calls_metric
    calls = last_value(rows, [f"val-aux/{calls_key}", f"val/{calls_key}", calls_key])
    return {"tool_task_accuracy_before": vals[min(vals)], "tool_task_accuracy_after": vals[max(vals)],
            "grpo_last_step": float(max(vals)), "tool_calls_per_sample": float("nan") if calls is None else calls}


def main(argv=None) -> int:
    args = parse_args(argv)
    work = Path(args.work_dir).expanduser().resolve()
    work.mkdir(parents=True, exist_ok=True)
    timeout_s = args.timeout_min * 60
    times: dict[str, float] = {}
    start = time.time()
    rl, no_tool, sft_data = make_data(args, work, timeout_s)
    stage = time.time()
    base = base_accuracy(args, work, no_tool / "test.parquet", timeout_s)
    times["time/base_s"], stage = time.time() - stage, time.time()
    sft_model = args.sft_model
    if sft_model is None:
        run("sft", sft_command(args, sft_data, work / "sft"), work, timeout_s)
        sft_model = str(work / "sft" / f"global_step_{args.sft_steps}")
    times["time/sft_s"], stage = time.time() - stage, time.time()
    figures = grpo(args, sft_model, rl, work, timeout_s)
    times["time/grpo_s"] = time.time() - stage
    times["time/total_s"] = time.time() - start
    results = {**times, "eval_prompts": args.eval_size, "grpo_last_step": figures.pop("grpo_last_step"),
               "grpo_gain": figures["tool_task_accuracy_after"] - figures["tool_task_accuracy_before"],
               "base_accuracy": base, **figures}
    (work / "results.json").write_text(json.dumps({**results, "args": vars(args)}, indent=2))
    for name, value in results.items():
        print(f"{name}: {round(value, 4)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
