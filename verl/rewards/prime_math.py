"""PRIME's math reward (upstream's `verl.utils.reward_score.prime_math`), used for the NuminaMath data sources.

Unlike the MATH scorer it does not need a `\\boxed{}` answer: it takes the final answer from the text the way
PRIME does (after the last "answer is" / "answer:", inside the last `\\boxed{}`, after the last "=" or "is ",
...) and then compares it with the ground truth: normalized strings or equal numbers first, then symbolically
with math_verify when installed (matrices, expanded vs factored polynomials, radicals).
"""

from __future__ import annotations

from verl.rewards.math_normalize import extract_boxed_answer
from verl.rewards.math_reward import answers_equivalent

# Markers after which the answer follows; the last one in the text wins. Tried in this order, each on what the
# previous ones left, as PRIME does.
_ANSWER_AFTER = ("answer:", "answer is", "answers are")
_ANSWER_BEFORE = ("is answer", "is the answer", "are answers", "are the answers")
_VALUE_AFTER = ("be ", "is ", "are ", "=", ": ", "get ", "be\n", "is\n", "are\n", ":\n", "get\n")


def _after_last(text: str, markers: tuple[str, ...]) -> tuple[str, bool]:
    found = False
    for marker in markers:
        at = text.lower().rfind(marker)
        if at != -1:
            text, found = text[at + len(marker) :].strip(), True
    return text, found


def match_answer(response: str) -> tuple[bool, str]:
    """(whether an answer was found, the answer text). Found means a marker or a box was seen and the answer
    holds a digit; the text is returned either way, since a bare final expression is still graded."""
    text, matched = _after_last(response, _ANSWER_AFTER)
    for marker in _ANSWER_BEFORE:
        at = text.lower().rfind(marker)
        if at != -1:
            text, matched = text[:at].strip(), True
    boxed = extract_boxed_answer(text)
    if boxed:
        text, matched = boxed, True
    if ". " in text:
        # the answer sentence is the last one; drop what trails it
        text = text[: text.rfind(". ")].strip()
    text, found = _after_last(text, _VALUE_AFTER)
    matched = (matched or found) and any(ch.isdigit() for ch in text)
    return matched, text


def compute_score(model_output: str, ground_truth: str) -> tuple[bool, bool, str]:
    """(is_correct, format_correctness, extracted answer), as upstream. format_correctness is PRIME's format
    check: the output has a "Step 2:" and a box."""
    model_output, ground_truth = str(model_output), str(ground_truth)
    _matched, extracted = match_answer(model_output)
    format_correctness = "Step 2:" in model_output and "\\box" in model_output
    truth = extract_boxed_answer(ground_truth) or ground_truth
    return answers_equivalent(extracted, truth.strip()), format_correctness, extracted


__all__ = ["compute_score", "match_answer"]
