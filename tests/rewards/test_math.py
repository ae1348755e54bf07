"""MATH answers: boxed extraction, normalization, math_verify fallback, and the DAPO variant."""

import pytest

from verl.rewards import math_dapo, math_reward
from verl.rewards import math_verify as mv
from verl.rewards.math_normalize import (
    extract_boxed_answer,
    is_equiv,
    last_boxed_only_string,
    normalize_answer,
    remove_boxed,
)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so \\boxed{5}", "5"),
        ("\\boxed{1} then \\boxed{\\frac{a}{b}}", "\\frac{a}{b}"),  # last one, nested braces kept
        ("\\fbox{7}", "7"),
        ("\\boxed 42 is it", "42"),
        ("no box", None),
        ("\\boxed{unclosed", None),
    ],
)
def test_extract_boxed_answer(text, expected):
    assert extract_boxed_answer(text) == expected


def test_last_boxed_only_string_and_remove_boxed():
    assert last_boxed_only_string("a \\boxed{x^{2}} b") == "\\boxed{x^{2}}"
    assert remove_boxed("\\boxed{x^{2}}") == "x^{2}"
    with pytest.raises(ValueError, match="expected"):
        remove_boxed("x")


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\tfrac12", "\\frac{1}{2}"),
        ("0.5", "\\frac{1}{2}"),
        ("3/4", "\\frac{3}{4}"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("90^\\circ", "90"),
        ("\\$5", "5"),
        ("5\\text{ cm}", "5"),
        ("x = 3", "3"),
        ("\\sqrt2", "\\sqrt{2}"),
        ("5.0", "5"),
        ("1,000", "1000"),
        ("50\\%", "50"),
        (".5", "\\frac{1}{2}"),
        ("\\text{(A)}", "(A)"),
        ("  7. ", "7"),
    ],
)
def test_normalize_answer(raw, expected):
    assert normalize_answer(raw) == expected


def test_is_equiv():
    assert is_equiv("\\frac{6}{4}", "\\frac{3}{2}")  # equal fractions
    assert is_equiv("2.50", "\\frac{5}{2}")
    assert not is_equiv("2", "3")
    assert not is_equiv(None, "3")


def test_math_compute_score():
    assert math_reward.compute_score("The answer is \\boxed{\\dfrac{1}{2}}.", "\\frac12") == 1.0
    assert math_reward.compute_score("The answer is \\boxed{3}.", "4") == 0.0
    assert math_reward.compute_score("The answer is 4.", "4") == 0.0  # the boxed format is required
    assert math_reward.compute_score("\\boxed{4}", "\\boxed{4}") == 1.0  # a boxed truth is unwrapped


@pytest.mark.skipif(not mv.is_available(), reason="math_verify not installed")
def test_math_verify_catches_what_strings_miss():
    # 2\sqrt{2} and \sqrt{8} differ as strings; only a symbolic check sees they are equal.
    assert not is_equiv("\\sqrt{8}", "2\\sqrt{2}")
    assert math_reward.compute_score("\\boxed{\\sqrt{8}}", "2\\sqrt{2}") == 1.0
    assert math_reward.compute_score("\\boxed{\\sqrt{7}}", "2\\sqrt{2}") == 0.0
    assert mv.compute_score("so \\boxed{x+1}", "1+x") == 1.0


def test_math_dapo_answer_line_and_box():
    assert math_dapo.compute_score("work\nAnswer: 42", "42") == {"score": 1.0, "acc": True, "pred": "42"}
    assert math_dapo.compute_score("work\nAnswer: 41", "42") == {"score": -1.0, "acc": False, "pred": "41"}
    assert math_dapo.compute_score("no answer at all", "42") == {"score": -1.0, "acc": False, "pred": ""}
    strict = math_dapo.compute_score("Answer: 7 but \\boxed{42}", "42", strict_box_verify=True)
    assert strict["acc"] is True


@pytest.mark.parametrize("raw, canonical", [("033", "33"), ("+033", "33"), ("-0", "0"), ("000", "0"), ("-12", "-12")])
def test_canonical_int_rewrites_plain_signed_integers(raw, canonical):
    from verl.utils.reward_score.math import _canonical_int_if_safe

    assert _canonical_int_if_safe(raw) == canonical


@pytest.mark.parametrize("text", ["3.3", "foo", "--33", "", "+", "33a", "1,000"])
def test_canonical_int_leaves_anything_else_unchanged(text):
    from verl.utils.reward_score.math import _canonical_int_if_safe

    assert _canonical_int_if_safe(text) == text
