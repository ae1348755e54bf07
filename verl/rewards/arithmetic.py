"""Reward for the bundled arithmetic word-problem task (examples/data_preprocess/arithmetic.py).

Strict: the integer after the last `####` must equal the ground truth. Prose answers earn nothing, so the
policy is rewarded for the format it is asked (and shown, by the one-shot example) to use.
"""

from __future__ import annotations

import re

DATA_SOURCE = "arithmetic"

# An optional '$' and thousands separators are tolerated; a decimal part must be zero ("14.0" is 14).
_ANSWER_PATTERN = re.compile(r"####\s*\$?\s*(-?\d[\d,]*(?:\.\d+)?)")


def extract_answer(solution_str: str) -> int | None:
    """The integer after the last `####`, or None when there is none (or it is not a whole number)."""
    matches = _ANSWER_PATTERN.findall(solution_str)
    if not matches:
        return None
    text = matches[-1].replace(",", "")
    whole, _, fraction = text.partition(".")
    if fraction and int(fraction) != 0:
        return None
    return int(whole)


def compute_score(
    solution_str: str,
    ground_truth: str | int,
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """`score` for the right integer, `format_score` for a wrong one after `####`, 0 without an answer."""
    try:
        truth = int(str(ground_truth).strip().replace(",", ""))
    except ValueError as exc:
        raise ValueError(
            f"arithmetic.compute_score: ground_truth must be an integer, got {ground_truth!r}; "
            "regenerate the data with examples/data_preprocess/arithmetic.py"
        ) from exc
    answer = extract_answer(solution_str)
    if answer is None:
        return 0.0
    return score if answer == truth else format_score
