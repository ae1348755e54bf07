"""MATH reward: the last `\\boxed{}` answer, compared after normalization, then symbolically via math_verify."""

from __future__ import annotations

from verl.rewards import math_verify as _math_verify
from verl.rewards.math_normalize import (  # noqa: F401  (upstream's names at verl.utils.reward_score.math)
    _canonical_int_if_safe,
    extract_boxed_answer,
    is_equiv,
    last_boxed_only_string,
    remove_boxed,
)


def _strip_boxed_truth(ground_truth: str) -> str:
    """Some datasets store the truth as `\\boxed{x}`; compare its content."""
    boxed = extract_boxed_answer(ground_truth)
    return ground_truth if boxed is None else boxed


def answers_equivalent(answer: str, ground_truth: str) -> bool:
    """Normalized string/number equality first (cheap, deterministic), then math_verify when installed."""
    if is_equiv(answer, ground_truth):
        return True
    if _math_verify.is_available():
        return _math_verify.verify_equivalent(answer, ground_truth)
    return False


def compute_score(solution_str: str, ground_truth: str) -> float:
    """1.0 if the last boxed answer equals the ground truth, else 0.0 (also 0.0 without a boxed answer)."""
    answer = extract_boxed_answer(solution_str)
    if answer is None:
        return 0.0
    return 1.0 if answers_equivalent(answer, _strip_boxed_truth(str(ground_truth))) else 0.0
