"""check_correctness as upstream's tests drive it: through a patched module-level call_sandbox_api, with bad test
data scored rather than raised, while an unreachable or malformed sandbox URL still stops the run."""

import threading
from unittest.mock import patch

import pytest
from verl.utils.reward_score.sandbox_fusion.utils import check_correctness

from verl.rewards.sandbox_fusion import utils as ours
from verl.sandbox.client import SandboxUnavailable

PATCH_TARGET = "verl.utils.reward_score.sandbox_fusion.utils.call_sandbox_api"


def _finished(stdout):
    return {"status": "Success", "run_result": {"status": "Finished", "stdout": stdout, "return_code": 0}}, None


def test_each_case_goes_through_the_patched_call_by_keyword():
    seen = []

    def fake(**kwargs):
        seen.append(kwargs)
        return _finished(kwargs["stdin"].replace("in", "out"))

    with patch(PATCH_TARGET, side_effect=fake) as mock:
        results, meta = check_correctness("mock_url", {"inputs": ["in1", "in2"], "outputs": ["out1", "nope"]},
                                          "print(1)", timeout=7, memory_limit_mb=256, language="python")
    assert results == [True, False] and mock.call_count == 2
    assert [m["status"] for m in meta] == ["success", "wrong_answer"] and [m["case_index"] for m in meta] == [0, 1]
    assert {k for k in seen[0]} == {"sandbox_fusion_url", "code", "stdin", "compile_timeout", "run_timeout",
                                    "memory_limit_mb", "language"}
    assert seen[0]["run_timeout"] == 7 and seen[0]["memory_limit_mb"] == 256 and seen[0]["code"] == "print(1)"


def test_an_api_error_scores_that_case_minus_one():
    def fake(**kwargs):
        return (None, "Gateway Timeout (504)") if kwargs["stdin"] == "b" else _finished("ok")

    with patch(PATCH_TARGET, side_effect=fake):
        results, meta = check_correctness("mock_url", {"inputs": ["a", "b"], "outputs": ["ok", "ok"]}, "x",
                                          concurrent_semaphore=threading.Semaphore(1))
    assert results == [True, -1]
    assert meta[1]["status"] == "api_error" and meta[1]["api_request_error"] == "Gateway Timeout (504)"


@pytest.mark.parametrize("in_outs", [None, {}, {"inputs": ["a"]}, {"outputs": ["a"]}, "not a mapping"])
def test_invalid_test_data_is_scored_not_raised(in_outs):
    with patch(PATCH_TARGET) as mock:
        assert check_correctness("mock_url", in_outs, "x") == ([-1], [{"error": "Invalid input/output data"}])
    mock.assert_not_called()


def test_count_mismatch_gives_minus_one_per_input():
    results, meta = check_correctness("mock_url", {"inputs": ["a", "b"], "outputs": ["a"]}, "x")
    assert results == [-1, -1]
    assert meta == [{"error": "Input/output count mismatch", "case_index": i} for i in range(2)]


def test_unreachable_service_and_bad_url_still_raise():
    cases = {"inputs": ["a"], "outputs": ["a"]}
    with pytest.raises(SandboxUnavailable):
        check_correctness("http://127.0.0.1:9/run_code", cases, "x")
    with pytest.raises(ValueError, match="not an http\\(s\\) URL"):
        check_correctness("mock_url", cases, "x")
    response, error = ours.call_sandbox_api("mock_url", "x", None, 1, 1, 64)
    assert response is None and error.startswith("API request failed") and isinstance(error, str)
