"""Answer extraction for `####`-style tasks: GSM8K (strict / flexible) and the bundled arithmetic task."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from verl.rewards import arithmetic, gsm8k


@pytest.mark.parametrize(
    "text, method, expected",
    [
        ("12 + 5 = 17. #### 17", "strict", "17"),
        ("first #### 3 then #### 4", "strict", "4"),  # the last marker wins
        ("total #### 1,234.", "strict", "1234"),  # separators and a closing period are not the answer
        ("#### -5", "strict", "-5"),
        ("####12", "strict", "12"),
        ("the answer is 17", "strict", None),  # strict needs the marker
        ("the answer is 17", "flexible", "17"),
        ("3 apples, then 4. Done.", "flexible", "4"),
        ("no digits here", "flexible", None),
    ],
)
def test_gsm8k_extract_solution(text, method, expected):
    assert gsm8k.extract_solution(text, method=method) == expected


def test_gsm8k_only_looks_at_the_tail():
    # An answer more than 300 characters before the end is outside the clipped tail.
    assert gsm8k.extract_solution("#### 7" + " x" * 200) is None


def test_gsm8k_scores():
    assert gsm8k.compute_score("so #### 18", "18") == 1.0
    assert gsm8k.compute_score("so #### 18.00", "18") == 1.0  # numerically equal
    assert gsm8k.compute_score("so #### 19", "18") == 0.0
    assert gsm8k.compute_score("so #### 19", "18", format_score=0.1) == 0.1
    assert gsm8k.compute_score("no answer", "18", format_score=0.1) == 0.0
    assert gsm8k.compute_score("it is 18", "18", method="flexible") == 1.0
    assert gsm8k.compute_score("so #### 18", "18", score=2.0) == 2.0


def test_gsm8k_rejects_unknown_method():
    with pytest.raises(ValueError, match="strict"):
        gsm8k.extract_solution("#### 1", method="loose")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("12 + 5 = 17. 17 - 3 = 14. #### 14", 14),
        ("#### 3 ... actually #### 5", 5),
        ("#### 14.", 14),
        ("#### $1,000", 1000),
        ("#### 14.0", 14),
        ("#### 14.5", None),  # not a whole number
        ("#### -2", -2),
        ("The answer is 14.", None),
        ("####", None),
    ],
)
def test_arithmetic_extract_answer(text, expected):
    assert arithmetic.extract_answer(text) == expected


def test_arithmetic_scores():
    assert arithmetic.compute_score("9 + 6 = 15. #### 15", "15") == 1.0
    assert arithmetic.compute_score("#### 15", 15) == 1.0
    assert arithmetic.compute_score("#### 16", "15") == 0.0
    assert arithmetic.compute_score("#### 16", "15", format_score=0.1) == 0.1
    assert arithmetic.compute_score("fifteen", "15", format_score=0.1) == 0.0


def test_arithmetic_bad_ground_truth_names_the_fix():
    with pytest.raises(ValueError, match="ground_truth must be an integer"):
        arithmetic.compute_score("#### 1", "one")


@given(st.integers(min_value=-10**9, max_value=10**9), st.text(alphabet="abc .\n", max_size=30))
def test_arithmetic_right_integer_after_marker_always_scores(n, prefix):
    assert arithmetic.compute_score(f"{prefix} #### {n}", str(n)) == 1.0
    assert arithmetic.compute_score(f"{prefix} #### {n + 1}", str(n)) == 0.0
