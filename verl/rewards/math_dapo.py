"""DAPO-Math reward: +1 for a correct final answer, -1 otherwise, with the parsed prediction as extra info.

The DAPO prompts ask for a last line `Answer: $Answer`; `strict_box_verify=True` reads `\\boxed{}` instead.
"""

from __future__ import annotations

import re
from typing import Any

from verl.rewards.math_normalize import extract_boxed_answer, normalize_answer
from verl.rewards.math_reward import answers_equivalent

# Only the tail can hold the final answer; clipping keeps the regexes cheap on runaway generations.
_SOLUTION_CLIP_CHARS = 300
_ANSWER_LINE = re.compile(r"(?i)Answer\s*:\s*([^\n]+)")


def _extract_prediction(solution_str: str, strict_box_verify: bool) -> str | None:
    if strict_box_verify:
        return extract_boxed_answer(solution_str)
    lines = _ANSWER_LINE.findall(solution_str)
    if lines:
        answer = lines[-1].strip()
        boxed = extract_boxed_answer(answer)
        return boxed if boxed is not None else answer
    return extract_boxed_answer(solution_str)


def compute_score(
    solution_str: str,
    ground_truth: str,
    strict_box_verify: bool = False,
    pause_tokens_index: list[int] | None = None,
) -> dict[str, Any]:
    """`{"score": 1.0 | -1.0, "acc": bool, "pred": str}`. `pause_tokens_index` is accepted for upstream's
    signature and unused."""
    tail = solution_str[-_SOLUTION_CLIP_CHARS:]
    prediction = _extract_prediction(tail, strict_box_verify)
    correct = prediction is not None and answers_equivalent(prediction, str(ground_truth))
    return {
        "score": 1.0 if correct else -1.0,
        "acc": correct,
        "pred": "" if prediction is None else normalize_answer(prediction),
    }
