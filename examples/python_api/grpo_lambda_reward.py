"""GRPO from Python with a lambda reward: the demo (scripts/demo.sh) through `verl.train` instead of the CLI.

    python examples/python_api/grpo_lambda_reward.py                      # the demo's run, ~4-5 min on 2 cores
    python examples/python_api/grpo_lambda_reward.py trainer.total_training_steps=3   # extra overrides, as on the CLI

Same settings as the demo: SmolLM2-135M-Instruct (actor_rollout_ref.model.path unset = the bundled default model),
the arithmetic task at level 1, 8 prompts x 4 responses per step, 12 steps, validation on 64 prompts before and
after. The reward is a lambda instead of the built-in rule; the prompts are a list of dicts instead of files.
Sizes come from the environment so a test can run it on a tiny model: EXAMPLE_MODEL (a model folder),
EXAMPLE_STEPS, EXAMPLE_TRAIN_SIZE, EXAMPLE_TEST_SIZE, EXAMPLE_LEVEL, EXAMPLE_OUT (the run's folder),
EXAMPLE_ROLLOUT (vllm | hf; default vllm where it is installed).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

import verl

HERE = Path(__file__).resolve().parent


def arithmetic_rows(train_size: int, test_size: int, level: int) -> tuple[list[dict], list[dict]]:
    """The demo's prompts, from its own generator (examples/data_preprocess/arithmetic.py), as row dicts."""
    spec = importlib.util.spec_from_file_location("arithmetic_data", HERE.parent / "data_preprocess" / "arithmetic.py")
    gen = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = gen  # its dataclasses look their module up there
    spec.loader.exec_module(gen)
    problems = gen.generate_problems(train_size + test_size, level, seed=0)
    train = [gen.to_row(p, "train", i, level, fewshot=True) for i, p in enumerate(problems[:train_size])]
    test = [gen.to_row(p, "test", i, level, fewshot=True) for i, p in enumerate(problems[train_size:])]
    return train, test


ANSWER = re.compile(r"####\s*(-?\d+)")

# 1 when the last integer after "####" is the ground truth: the same strict rule as verl.rewards.arithmetic
reward = lambda data_source, solution_str, ground_truth, extra_info: float(  # noqa: E731 (the point: a lambda)
    bool(ANSWER.findall(solution_str)) and int(ANSWER.findall(solution_str)[-1]) == int(ground_truth))


def main(extra_overrides: list[str]) -> verl.TrainResult:
    env = os.environ.get
    steps = int(env("EXAMPLE_STEPS", "12"))
    rollout = env("EXAMPLE_ROLLOUT") or ("vllm" if importlib.util.find_spec("vllm") else "hf")
    train_rows, test_rows = arithmetic_rows(int(env("EXAMPLE_TRAIN_SIZE", "2048")), int(env("EXAMPLE_TEST_SIZE", "64")),
                                            int(env("EXAMPLE_LEVEL", "1")))
    model = env("EXAMPLE_MODEL")  # unset: actor_rollout_ref.model.path stays null, the bundled default model
    overrides = [  # the demo's command line, key for key
        "algorithm.adv_estimator=grpo",
        "data.train_batch_size=8", "data.max_prompt_length=256", "data.max_response_length=48",
        "actor_rollout_ref.rollout.n=4", "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.rollout.name={rollout}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32",
        "actor_rollout_ref.actor.optim.lr=1e-5",
        "trainer.n_gpus_per_node=1", f"trainer.total_training_steps={steps}", f"trainer.test_freq={steps}",
        "trainer.logger=[console]", "trainer.project_name=python_api", "trainer.experiment_name=grpo_lambda_reward",
        f"trainer.default_local_dir={env('EXAMPLE_OUT', 'outputs/python_api/run')}",
    ]
    if model:
        overrides.append(f"actor_rollout_ref.model.path={model}")
    if rollout == "vllm":
        overrides.append("actor_rollout_ref.rollout.max_num_seqs=64")  # holds the 64-prompt validation at once
    cfg = verl.config(overrides + extra_overrides)  # typed and checked: edit it like any dataclass
    cfg.trainer.val_before_train = True
    return verl.train(cfg, reward_fn=reward, train_data=train_rows, val_data=test_rows,
                      callbacks={"on_validation": lambda step, m: print(f"[example] step {step} validation: {m}")})


if __name__ == "__main__":  # vLLM starts worker processes: the guard keeps them from re-running this file
    result = main(sys.argv[1:])
    scores = [(step, m.get("val-core/arithmetic/reward/mean@1", m)) for step, m in result.validations]
    print(f"validation accuracy by step: {scores}")
    print(f"train reward by step: {[round(h.get('critic/score/mean', float('nan')), 3) for h in result.history]}")
    print(f"checkpoint: {result.checkpoint_path}  report: {result.report_dir}")
