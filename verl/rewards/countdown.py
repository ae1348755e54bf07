"""Countdown reward: the equation in the last `<answer>...</answer>` must use every given number exactly once
and evaluate to the target.

ground_truth = {"target": int, "numbers": list[int]}. Scores: `score` when right, `format_score` for a
well-formed answer that is wrong, 0 without an answer.
"""

from __future__ import annotations

import ast
import operator
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

_ANSWER_PATTERN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ALLOWED_CHARS = re.compile(r"^[\d+\-*/().\s]+$")
# Chat transcripts may contain the prompt; only what the assistant wrote counts.
_ASSISTANT_MARKERS = ("<|im_start|>assistant", "Assistant:")

_BINARY_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_UNARY_OPS = {ast.USub: operator.neg, ast.UAdd: operator.pos}


def extract_solution(solution_str: str) -> str | None:
    for marker in _ASSISTANT_MARKERS:
        if marker in solution_str:
            solution_str = solution_str.split(marker, 1)[1]
            break
    matches = _ANSWER_PATTERN.findall(solution_str)
    return matches[-1].strip() if matches else None


def _evaluate_node(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
        return _BINARY_OPS[type(node.op)](_evaluate_node(node.left), _evaluate_node(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
        return _UNARY_OPS[type(node.op)](_evaluate_node(node.operand))
    raise ValueError(f"unsupported expression element {ast.dump(node)}")


def evaluate_equation(equation: str) -> float | None:
    """The value of an expression over numbers, + - * / and parentheses; None if it is anything else or
    divides by zero. Parsed with `ast`, never `eval`, because the text comes from the model."""
    if not _ALLOWED_CHARS.match(equation):
        return None
    try:
        return float(_evaluate_node(ast.parse(equation, mode="eval").body))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None


def validate_equation(equation: str, available_numbers: list[int]) -> bool:
    """Every available number used exactly once, and no other number."""
    used = [int(number) for number in re.findall(r"\d+", equation)]
    return Counter(used) == Counter(int(number) for number in available_numbers)


def compute_score(
    solution_str: str,
    ground_truth: Mapping[str, Any],
    method: str = "strict",
    format_score: float = 0.1,
    score: float = 1.0,
) -> float:
    """`method` is accepted for upstream's signature; countdown has a single checking rule."""
    if not isinstance(ground_truth, Mapping) or "target" not in ground_truth or "numbers" not in ground_truth:
        raise ValueError(
            "countdown.compute_score: reward_model.ground_truth must be a dict with 'target' and 'numbers', "
            f"got {ground_truth!r}"
        )
    equation = extract_solution(solution_str)
    if equation is None:
        return 0.0
    if not validate_equation(equation, list(ground_truth["numbers"])):
        return format_score
    value = evaluate_equation(equation)
    if value is None:
        return format_score
    return score if abs(value - float(ground_truth["target"])) < 1e-5 else format_score
