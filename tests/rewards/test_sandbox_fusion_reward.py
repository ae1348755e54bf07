"""The code-execution reward against a real local sandbox service: stdin/stdout tests, upstream's score semantics."""

import json
import os
import shutil
import threading

import pytest

from verl.rewards import default_compute_score, known_data_sources
from verl.rewards.sandbox_fusion import compute_score, extract_code, parse_test_cases
from verl.rewards.sandbox_fusion.utils import outputs_match
from verl.sandbox.client import SandboxUnavailable
from verl.sandbox.local import LocalSandbox

ADD = {"inputs": ["1 2\n", "10 -3\n", "0 0\n", "5 5\n"], "outputs": ["3\n", "7\n", "0\n", "10\n"]}
CORRECT = "Here is my solution:\n```python\na, b = map(int, input().split())\nprint(a + b)\n```\n"
# Right only when the answer is below 5: passes "1 2" and "0 0", fails "10 -3" (prints 13) and "5 5".
HALF = "```python\na, b = map(int, input().split())\nprint(a + b if a + b < 5 else a - b + 3)\n```"


@pytest.fixture(scope="module")
def sandbox_url():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the sandbox needs root and util-linux unshare to build its namespaces")
    with LocalSandbox(max_concurrency=4) as url:
        yield url


def test_all_cases_pass(sandbox_url):
    score, metadata = compute_score(sandbox_url, threading.Semaphore(2), 1024, CORRECT, ADD)
    assert score == 1.0
    assert [m["status"] for m in metadata] == ["success"] * 4
    assert [m["stdout"] for m in metadata] == ADD["outputs"]


def test_score_is_the_fraction_passed(sandbox_url):
    score, metadata = compute_score(sandbox_url, None, 1024, HALF, json.dumps(ADD))
    assert score == 0.5
    assert [m["status"] for m in metadata] == ["success", "wrong_answer", "success", "wrong_answer"]


def test_runtime_error_and_timeout_score_zero(sandbox_url):
    crash = "```python\nraise SystemExit(input() and 4)\n```"
    score, metadata = compute_score(sandbox_url, None, 1024, crash, ADD)
    assert score == 0.0 and {m["status"] for m in metadata} == {"runtime_error"}
    loop = "```python\nwhile True:\n    pass\n```"
    score, metadata = compute_score(sandbox_url, None, 1024, loop, {"inputs": [""], "outputs": [""]}, timeout=1)
    assert score == 0.0 and metadata[0]["status"] == "timeout"


def test_continuous_scores_the_first_ten_cases(sandbox_url):
    cases = {"inputs": [f"{i}\n" for i in range(12)], "outputs": [f"{i}\n" for i in range(10)] + ["x\n", "y\n"]}
    echo = "```python\nprint(input())\n```"
    assert compute_score(sandbox_url, None, 1024, echo, cases)[0] == pytest.approx(10 / 12)
    score, metadata = compute_score(sandbox_url, None, 1024, echo, cases, continuous=True)
    assert score == 1.0 and len(metadata) == 10


def test_default_compute_score_routes_code_contests_to_the_sandbox(sandbox_url):
    for source in ("codecontests", "apps", "codeforces", "taco"):
        assert source in known_data_sources()
    kwargs = {"sandbox_fusion_url": sandbox_url, "concurrent_semaphore": threading.Semaphore(4), "memory_limit_mb": 512}
    assert default_compute_score("codecontests", CORRECT, json.dumps(ADD), None, **kwargs) == 1.0
    assert default_compute_score("taco", HALF, ADD, None, **kwargs) == 0.5


def test_code_contest_without_url_runs_on_this_machine_with_prime_code():
    # as upstream: no sandbox url -> prime_code, the tests run in a confined child process here
    assert default_compute_score("apps", CORRECT, ADD, None) == 1.0


def test_other_data_sources_ignore_the_sandbox_kwargs():
    score = default_compute_score(
        "openai/gsm8k", "#### 72", "72", None, sandbox_fusion_url="http://unused", memory_limit_mb=1
    )
    assert score == 1.0


def test_unreachable_sandbox_is_an_error_not_a_zero():
    with pytest.raises(SandboxUnavailable):
        compute_score("http://127.0.0.1:9/run_code", None, 1024, CORRECT, ADD)


def test_bad_test_cases_name_the_problem():
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_test_cases("{inputs: ")
    with pytest.raises(ValueError, match='"inputs"'):
        parse_test_cases({"input": []})


def test_extract_code():
    assert extract_code("a\n```python\nprint(1)\n```\nthen\n```python\nprint(2)\n```") == "\nprint(2)\n"
    assert extract_code("```py\nprint(3)\n```") == "print(3)\n"
    assert extract_code("```\nprint(4)\n```") == "\nprint(4)\n"
    assert extract_code("print(5)") == "print(5)"


def test_outputs_match_ignores_only_trailing_whitespace():
    assert outputs_match("3\n", "3")
    assert outputs_match("1 2 \n3\n\n", "1 2\n3")
    assert not outputs_match("3\n", "4\n")
    assert not outputs_match(" 3", "3")
