"""Countdown equations and default_compute_score's routing by data_source."""

import pytest

from verl.rewards import countdown, default_compute_score, known_data_sources

TRUTH = {"target": 16, "numbers": [2, 3, 5]}


@pytest.mark.parametrize(
    "response, expected",
    [
        ("<answer>(3 + 5) * 2</answer>", 1.0),
        ("<answer>2 * (5 + 3)</answer>", 1.0),
        ("<answer>(3 + 5) * 2</answer> wait <answer>3 + 5 + 2</answer>", 0.1),  # last answer counts: = 10
        ("<answer>(3 + 5) * 2 * 2</answer>", 0.1),  # 2 used twice
        ("<answer>8 * 2</answer>", 0.1),  # numbers not from the list
        ("<answer>__import__('os')</answer>", 0.1),  # not arithmetic: never evaluated
        ("<answer>(3 + 5) / (2 - 2)</answer>", 0.1),  # uses 2 twice; also divides by zero
        ("(3 + 5) * 2", 0.0),  # no answer tags
    ],
)
def test_countdown_scores(response, expected):
    assert countdown.compute_score(response, TRUTH) == pytest.approx(expected)


def test_countdown_ignores_the_prompt_part():
    text = "User: use <answer>1+1</answer> style\n<|im_start|>assistant\n<answer>5 * 3 + 2 - 1</answer>"
    assert countdown.extract_solution(text) == "5 * 3 + 2 - 1"


def test_countdown_evaluate_equation():
    assert countdown.evaluate_equation("(1 + 2) * 3 / 4") == pytest.approx(2.25)
    assert countdown.evaluate_equation("1 / 0") is None
    assert countdown.evaluate_equation("2 ** 3") is None  # power is not an allowed operation
    assert countdown.evaluate_equation("abs(-3)") is None


def test_countdown_bad_ground_truth():
    with pytest.raises(ValueError, match="target"):
        countdown.compute_score("<answer>1</answer>", {"numbers": [1]})


def test_default_compute_score_routes_by_data_source():
    assert default_compute_score("openai/gsm8k", "#### 72", "72") == 1.0
    assert default_compute_score("openai/gsm8k", "72", "72") == 0.0  # strict
    assert default_compute_score("lighteval/MATH", "\\boxed{\\dfrac{1}{2}}", "\\frac{1}{2}") == 1.0
    assert default_compute_score("HuggingFaceH4/MATH-500", "\\boxed{3}", "4") == 0.0
    assert default_compute_score("countdown", "<answer>(3 + 5) * 2</answer>", TRUTH) == 1.0
    assert default_compute_score("arithmetic", "5 + 9 = 14. #### 14", "14", extra_info={"index": 0}) == 1.0
    dapo = default_compute_score("aime2024", "Answer: 12", "12")
    assert dapo["score"] == 1.0 and dapo["acc"] is True
    assert isinstance(default_compute_score("openai/gsm8k", "#### 1", "1"), float)


def test_default_compute_score_unknown_source_names_it_and_the_fix():
    with pytest.raises(NotImplementedError) as info:
        default_compute_score("my/new-task", "x", "y")
    message = str(info.value)
    assert "my/new-task" in message
    assert "custom_reward_function.path" in message
    assert "openai/gsm8k" in message and "arithmetic" in message


def test_known_data_sources_lists_the_builtins():
    known = known_data_sources()
    for name in ("openai/gsm8k", "lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "countdown", "arithmetic"):
        assert name in known
