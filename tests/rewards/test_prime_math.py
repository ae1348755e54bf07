"""prime_math: PRIME's answer extraction (boxed or not) and symbolic comparison, for the numina_* data sources."""

import pytest

from verl.rewards import default_compute_score, prime_math
from verl.rewards.prime_math import compute_score, match_answer
from verl.utils.reward_score import prime_math as upstream_path


def test_upstream_path_is_the_same_module():
    assert upstream_path is prime_math


@pytest.mark.parametrize(("response", "answer"), [
    ("The answer is 42", "42"),
    ("Answer: 7.", "7."),
    ("12 is the answer", "12"),
    ("We get \\boxed{x = 5}", "5"),
    ("First step. Then x = 3. Done", "3"),
    ("no digits here", "no digits here"),
])  # fmt: skip
def test_match_answer_takes_the_final_answer(response, answer):
    matched, extracted = match_answer(response)
    assert extracted == answer and matched == any(c.isdigit() for c in answer)


def test_unboxed_and_symbolic_answers():
    assert compute_score("x^2 + y^2 + 4x - 6y + 13", "(x + 2)^2 + (y - 3)^2")[0] is True
    assert compute_score("the answer is \\frac{\\sqrt{505}}{7}", "\\frac{\\sqrt{505}}{7}")[0] is True
    assert compute_score("the answer is 0.5", "\\frac{1}{2}")[0] is True
    assert compute_score("the answer is 3", "4")[0] is False
    assert compute_score("Step 1: ... Step 2: so \\boxed{4}", "\\boxed{4}") == (True, True, "4")


def test_numina_sources_use_it():
    assert default_compute_score("numina_olympiads", "hence the answer is 2x+1", "1+2x") == 1.0
    assert default_compute_score("numina_cn_k12", "hence the answer is 2x+2", "1+2x") == 0.0
