"""GSM8K reward: the number after `####` (strict) or the last number in the text (flexible)."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# Only the tail can hold the final answer; clipping keeps the regex cheap on runaway generations.
_SOLUTION_CLIP_CHARS = 300

_STRICT_PATTERN = re.compile(r"####\s*\$?\s*(-?[0-9][0-9.,]*)")
_FLEXIBLE_PATTERN = re.compile(r"-?[0-9][0-9.,]*")


def _clean_number(text: str) -> str:
    """'1,234.' -> '1234': thousands separators and sentence-ending periods are not part of the answer."""
    return text.replace(",", "").rstrip(".")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    if method not in ("strict", "flexible"):
        raise ValueError(f"gsm8k.extract_solution: method must be 'strict' or 'flexible', got {method!r}")
    tail = solution_str[-_SOLUTION_CLIP_CHARS:]
    pattern = _STRICT_PATTERN if method == "strict" else _FLEXIBLE_PATTERN
    matches = pattern.findall(tail)
    for raw in reversed(matches):
        cleaned = _clean_number(raw)
        if cleaned and cleaned not in ("-",):
            return cleaned
    return None


def answers_match(answer: str, ground_truth: str) -> bool:
    """Numeric equality when both sides are numbers ('18.00' == '18'), exact string equality otherwise."""
    truth = _clean_number(str(ground_truth).strip())
    try:
        return Decimal(answer) == Decimal(truth)
    except InvalidOperation:
        return answer == truth


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """`score` if the extracted answer equals the ground truth, `format_score` if an answer was found but is
    wrong, 0 if no answer was found."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0.0
    return score if answers_match(answer, ground_truth) else format_score
