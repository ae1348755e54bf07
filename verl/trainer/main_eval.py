"""Scoring generations: a parquet with a list of responses per prompt -> scores per data source.

    python -m verl.trainer.main_eval data.path=~/data/arithmetic/gen.parquet data.output_path=eval.json

Each response is scored by `default_compute_score(data_source, response, ground_truth, extra_info)` (or the
`custom_reward_function`). Per data source:
  test_score  mean reward over all responses (upstream's `test_score/<data_source>`)
  pass@1      mean over prompts of the fraction of correct responses
  pass@k      k = 2, 4, ..., n with n samples per prompt: the unbiased estimator 1 - C(n-c, k) / C(n, k)
              (Chen et al. 2021, c = correct responses of the prompt), averaged over prompts
A response is correct when its reward function says so (`acc` in a dict result), else when its score is >= 1.
The JSON report also carries the validation metrics main_ppo logs (mean@n, best@k, ... in `val-core/...` names).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import hydra
import numpy as np
import pyarrow.parquet as pq
from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.evaluation import EvaluationConfig
from verl.trainer.sft.argv import exit_on_config_error, precheck_argv
from verl.utils.config_errors import ConfigError
from verl.utils.config_schema import build_config


@dataclass
class PromptScores:
    data_source: str
    scores: list[float] = field(default_factory=list)
    correct: list[bool] = field(default_factory=list)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k responses drawn without replacement from n (c correct) is correct."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per prompt, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def k_values(n: int) -> list[int]:
    """1, 2, 4, ... below n, then n."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return ks + [n]


def _as_list(responses: Any, row: int, key: str) -> list[str]:
    if isinstance(responses, str):
        return [responses]
    if isinstance(responses, list | tuple | np.ndarray) and all(isinstance(r, str) for r in responses):
        return list(responses)
    raise ValueError(f"row {row}: column {key!r} (data.response_key) must hold a list of response strings, "
                     f"got {responses!r:.200}")


def _score(result: Any) -> tuple[float, bool]:
    from verl.rewards.result import RewardResult

    if isinstance(result, RewardResult):  # upstream's structured result: its score and extra fields, as a dict
        result = result.to_dict()
    if isinstance(result, dict):
        if "score" not in result:
            raise KeyError(f"the reward function returned a dict without 'score': {sorted(result)}")
        score = float(result["score"])
        return score, bool(result["acc"]) if "acc" in result else score >= 1.0
    score = float(result)
    return score, score >= 1.0


def score_table(rows: Sequence[dict], config: EvaluationConfig, compute_score: Callable[..., Any]) -> list[PromptScores]:
    data = config.data
    out = []
    for i, row in enumerate(rows):
        reward_data = row.get(data.reward_model_key) or {}
        if "ground_truth" not in reward_data:
            raise KeyError(f"row {i}: column {data.reward_model_key!r} (data.reward_model_key) has no 'ground_truth'")
        prompt = PromptScores(data_source=str(row[data.data_source_key]))
        for response in _as_list(row[data.response_key], i, data.response_key):
            score, correct = _score(compute_score(data_source=prompt.data_source, solution_str=response,
                                                  ground_truth=reward_data["ground_truth"],
                                                  extra_info=row.get("extra_info")))
            prompt.scores.append(score)
            prompt.correct.append(correct)
        if not prompt.scores:
            raise ValueError(f"row {i}: no responses in column {data.response_key!r}")
        out.append(prompt)
    return out


def summarize(prompts: Sequence[PromptScores]) -> dict[str, dict[str, float]]:
    """{data_source: {num_prompts, samples_per_prompt, test_score, pass@1, pass@2, ...}}."""
    by_source: dict[str, list[PromptScores]] = defaultdict(list)
    for prompt in prompts:
        by_source[prompt.data_source].append(prompt)
    report = {}
    for source, group in sorted(by_source.items()):
        n_min = min(len(p.scores) for p in group)
        metrics: dict[str, float] = {
            "num_prompts": len(group),
            "samples_per_prompt": n_min,
            "test_score": float(np.mean([s for p in group for s in p.scores])),
        }
        for k in k_values(n_min):
            metrics[f"pass@{k}"] = float(np.mean([pass_at_k(len(p.correct), sum(p.correct), k) for p in group]))
        report[source] = metrics
    return report


def validation_style_metrics(prompts: Sequence[PromptScores]) -> dict[str, float]:
    """main_ppo's validation numbers (`val-core/<source>/reward/mean@n`, best@k, ...) for the same scores."""
    from verl.trainer.ppo.metric_utils import process_validation_metrics, validation_metrics_to_dict

    sources, inputs, rewards = [], [], []
    for i, prompt in enumerate(prompts):
        for score in prompt.scores:
            sources.append(prompt.data_source)
            inputs.append(f"row{i}")  # rows are the groups, even when two rows share a prompt text
            rewards.append(score)
    return validation_metrics_to_dict(process_validation_metrics(sources, inputs, {"reward": rewards}))


def format_table(report: dict[str, dict[str, float]]) -> str:
    ks = sorted({int(m[5:]) for metrics in report.values() for m in metrics if m.startswith("pass@")})
    header = ["data_source", "prompts", "samples", "test_score"] + [f"pass@{k}" for k in ks]
    rows = [[source, str(int(m["num_prompts"])), str(int(m["samples_per_prompt"])), f"{m['test_score']:.4f}"]
            + [f"{m[f'pass@{k}']:.4f}" if f"pass@{k}" in m else "-" for k in ks] for source, m in report.items()]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)) for line in [header, *rows]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def _output_path(config: EvaluationConfig) -> str:
    path = config.data.output_path
    if path:
        return os.path.abspath(os.path.expanduser(path))
    data_path = os.path.abspath(os.path.expanduser(config.data.path))
    return (data_path[: -len(".parquet")] if data_path.endswith(".parquet") else data_path) + ".eval.json"


def validate_eval_config(config: DictConfig | dict) -> EvaluationConfig:
    """The typed config, or ConfigError listing every problem with its key (data.path and its columns too)."""
    node = config if isinstance(config, DictConfig) else OmegaConf.create(config)
    result = build_config(EvaluationConfig, node)
    problems = result.problems or check_eval_inputs(result.config)
    if problems:
        raise ConfigError(problems)
    return result.config


def check_eval_inputs(config: EvaluationConfig) -> list[str]:
    """Problems with data.path and its columns, each naming the key, found before any scoring."""
    data = config.data
    path = os.path.expanduser(data.path)
    if not os.path.isfile(path):
        return [f"data.path: parquet file {data.path!r} does not exist"]
    columns = pq.read_schema(path).names
    wanted = {"data.response_key": data.response_key, "data.data_source_key": data.data_source_key,
              "data.reward_model_key": data.reward_model_key}
    return [f"data.path {data.path!r} has no column {name!r} ({key}); columns: {columns}. Responses come from "
            "python -m verl.trainer.main_generation." for key, name in wanted.items() if name not in columns]


def run_eval(config: EvaluationConfig) -> dict[str, Any]:
    """Score, print the table, write the JSON report; returns the report."""
    from tqdm import tqdm

    from verl.rewards import default_compute_score
    from verl.trainer.ppo.reward import get_custom_reward_fn

    problems = check_eval_inputs(config)
    if problems:
        raise ValueError("\n".join(problems))
    path = os.path.expanduser(config.data.path)
    table = pq.read_table(path)
    compute_score = get_custom_reward_fn(config) or default_compute_score
    rows = table.to_pylist()
    prompts = score_table(tqdm(rows, desc="scoring", unit="prompt", file=sys.stderr), config, compute_score)
    per_source = summarize(prompts)
    flat = {f"{metric}/{source}": value for source, metrics in per_source.items() for metric, value in metrics.items()
            if metric not in ("num_prompts", "samples_per_prompt")}
    report = {"data_path": os.path.abspath(path), "per_data_source": per_source, "metrics": flat,
              "validation_metrics": validation_style_metrics(prompts)}
    print(format_table(per_source))
    out = _output_path(config)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {out}")
    return report


@hydra.main(config_path="config", config_name="evaluation", version_base=None)
def main(config: DictConfig) -> None:
    try:
        typed = validate_eval_config(config)
    except ConfigError as err:
        exit_on_config_error(err)
    run_eval(typed)


if __name__ == "__main__":
    precheck_argv(EvaluationConfig, "evaluation")
    main()
