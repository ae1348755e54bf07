"""Geometry3K reward (upstream's geo3k rule, data_source hiyouga/geometry3k) and the bundled visual counting task.

geo3k: 0.9 * accuracy + 0.1 * format. Format: the response is `<think>...</think>` followed by text holding a
`\\boxed{...}`. Accuracy: the last boxed answer equals the ground truth (normalised, then symbolically).
visual_count: 1.0 when the last boxed answer is the integer in the ground truth, else 0.0.
"""

from __future__ import annotations

import re

from verl.rewards.math_normalize import extract_boxed_answer
from verl.rewards.math_reward import answers_equivalent

FORMAT_WEIGHT = 0.1
_FORMAT = re.compile(r"\s*<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def format_reward(solution_str: str) -> float:
    return 1.0 if _FORMAT.fullmatch(solution_str) else 0.0


def accuracy_reward(solution_str: str, ground_truth: str, use_boxed: bool = True) -> float:
    """``use_boxed=False``: the whole string is the answer (upstream's Geo3kTool submits a bare answer)."""
    answer = extract_boxed_answer(solution_str) if use_boxed else solution_str.strip()
    return 1.0 if answer is not None and answers_equivalent(answer, str(ground_truth)) else 0.0


acc_reward = accuracy_reward  # upstream's name


def compute_score(solution_str: str, ground_truth: str, use_boxed: bool = True,
                  format_score: float = FORMAT_WEIGHT) -> float:
    return (1.0 - format_score) * accuracy_reward(solution_str, ground_truth, use_boxed) + format_score * \
        format_reward(solution_str)


def count_score(solution_str: str, ground_truth: str) -> float:
    answer = extract_boxed_answer(solution_str)
    if answer is None:
        return 0.0
    try:
        return 1.0 if int(answer.strip()) == int(str(ground_truth).strip()) else 0.0
    except ValueError:
        return 0.0
