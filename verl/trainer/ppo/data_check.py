"""The data check main_ppo runs before Ray starts: what the configured reward needs from each row, and one pass
over the train and val files (verl.data.data_check) that reports every problem at once or logs one summary line.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from verl.data.data_check import DataCheckError, RowNeeds, SplitReport, check_split
from verl.trainer.config import PPOTrainerConfig

LOG_PREFIX = "[data check]"


def agent_loop_scores(config: PPOTrainerConfig) -> bool:
    """A user agent loop or an interaction may set each sample's reward itself (rollout.mode=async)."""
    rollout = config.actor_rollout_ref.rollout
    return rollout.mode == "async" and bool(rollout.agent.agent_loop_config_path
                                            or rollout.multi_turn.interaction_config_path)


def has_builtin_scorer(data_source: str) -> bool:
    """Whether default_compute_score has a rule for this data_source (exact name, or a registered prefix)."""
    from verl.rewards import known_data_sources

    for name in known_data_sources():
        if data_source == name or (name.endswith("*") and data_source.startswith(name[:-1])):
            return True
    return False


def row_needs(config: PPOTrainerConfig, custom_reward: bool = False) -> RowNeeds:
    """Judged from the config: a reward model or an agent loop scores without the rows' reward columns; a custom
    reward function gets them but decides itself what a missing ground truth means; only the built-in rules need a
    ground truth in every row and a scorer for every data_source."""
    data = config.data
    model_or_loop = config.reward_model.enable or agent_loop_scores(config)
    # custom_reward: a Python callable (verl.train's reward_fn) scores in place of the file
    builtin = not model_or_loop and not config.custom_reward_function.path and not custom_reward
    return RowNeeds(
        prompt_key=data.prompt_key,
        reward_fn_key=data.reward_fn_key,
        reward_columns=() if model_or_loop else (data.reward_fn_key, "reward_model"),
        ground_truth=builtin,
        has_scorer=has_builtin_scorer if builtin else None,
    )


def _summary(reports: list[SplitReport], seconds: float, max_prompt_length: int) -> str:
    parts = [f"{r.key.split('.')[-1].removesuffix('_files')} {r.rows} rows, {r.filtered} filtered" for r in reports]
    return (f"{LOG_PREFIX} {'; '.join(parts)} (prompts over data.max_prompt_length={max_prompt_length} tokens with "
            f"the chat template); {seconds:.1f} s")


def check_data(config: PPOTrainerConfig, tokenizer: Any, custom_reward: bool = False,
               processor: Any = None) -> list[SplitReport]:
    """Check the train and val files as configured; raise DataCheckError listing every problem, else log one line.

    A custom dataset class (data.custom_cls.path) reads the files its own way, so the check is skipped for it."""
    data = config.data
    if data.custom_cls.path:
        print(f"{LOG_PREFIX} skipped: data.custom_cls.path={data.custom_cls.path!r} reads the files itself",
              file=sys.stderr, flush=True)
        return []
    start = time.perf_counter()
    needs = row_needs(config, custom_reward)
    reports = [check_split("data.train_files", data.train_files, data, tokenizer, needs,
                           max_samples=data.train_max_samples, min_rows=data.resolved_gen_batch_size,
                           processor=processor)]
    if data.val_files:
        reports.append(check_split("data.val_files", data.val_files, data, tokenizer, needs,
                                   max_samples=data.val_max_samples, processor=processor))
    problems = [problem for report in reports for problem in report.problems]
    if problems:
        raise DataCheckError(problems)
    print(_summary(reports, time.perf_counter() - start, data.max_prompt_length), file=sys.stderr, flush=True)
    return reports


__all__ = ["check_data", "row_needs", "has_builtin_scorer", "DataCheckError"]
