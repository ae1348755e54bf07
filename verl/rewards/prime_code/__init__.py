"""PRIME's code reward (upstream's `verl.utils.reward_score.prime_code`): a completion's Python program run against
APPS-style tests on this machine, in a separate confined process (see `utils`), with no sandbox service.

Ground truth: {"inputs": [...], "outputs": [...]} (or that as JSON). Without "fn_name" each case is a program run:
the input is its stdin, the output what it must print (compared ignoring edge spaces and blank lines, numbers
within 1e-5). With "fn_name" each input is one JSON value per line, the arguments of that function (a method of
`Solution` when the program defines that class), and the output the JSON of its return value.

`compute_score(completion, test_cases, continuous=False)` -> (score, metadata), as upstream: all cases are run at
once; when all pass the score is True. Otherwise it is False, or with `continuous` the fraction of the first 10
cases that pass, each run on its own.
"""

from __future__ import annotations

import re
from typing import Any

from verl.rewards.prime_code.utils import DEFAULT_MEMORY_LIMIT_MB, check_correctness
from verl.rewards.sandbox_fusion import extract_code, parse_test_cases

# upstream's name for the same function
apps_check_correctness = check_correctness

CONTINUOUS_CASES = 10
ALL_CASES_TIMEOUT = 5  # seconds per case on the first run over every case (upstream's values)
SINGLE_CASE_TIMEOUT = 10

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)


def remove_think_tags(text: str) -> str:
    """The text without its <think>...</think> spans: code drafted while thinking is not the answer."""
    return _THINK.sub("", text)


def _single(cases: dict[str, Any], index: int) -> dict[str, Any]:
    one = {"inputs": [cases["inputs"][index]], "outputs": [cases["outputs"][index]]}
    if "fn_name" in cases:
        one["fn_name"] = cases["fn_name"]
    return one


def compute_score(
    completion: str,
    test_cases: Any,
    continuous: bool = False,
    *,
    memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB,
) -> tuple[bool | float, Any]:
    """Score one completion: (True, metadata) when every case passes; else (False, [metadata]) or, with
    `continuous`, (fraction of the first 10 cases passed, one metadata dict per case tried).

    A completion's code is its last ```python block (else its first ``` block, else all of it), outside any
    <think> span. No test cases scores False: nothing shows the program right.
    """
    solution = extract_code(remove_think_tags(completion))
    cases = parse_test_cases(test_cases)
    if not cases["inputs"]:
        return False, [{"error_message": "no test cases"}]
    results, metadata = check_correctness(
        cases, solution, timeout=ALL_CASES_TIMEOUT, debug=False, memory_limit_mb=memory_limit_mb
    )
    if len(results) == len(cases["inputs"]) and all(r is True for r in results):
        return True, metadata[0]
    if not continuous:
        return False, metadata
    if results == [-2]:
        # it does not compile (or lacks the function): no case can pass, so none is run again
        return 0.0, metadata
    # Cases are tried one by one (the first 10 only: some problems have thousands), so a failure early on does
    # not hide the later cases the program gets right. Those before the first failure passed the run above.
    passed_before = next((i for i, r in enumerate(results) if r is not True), len(results))
    passed, per_case = 0, []
    tried = min(CONTINUOUS_CASES, len(cases["inputs"]))
    for index in range(tried):
        one = _single(cases, index)
        if index < passed_before:
            results, metadata = [True], [{}]
        else:
            results, metadata = check_correctness(
                one, solution, timeout=SINGLE_CASE_TIMEOUT, debug=False, memory_limit_mb=memory_limit_mb
            )
        ok = len(results) == 1 and results[0] is True
        passed += ok
        per_case.append({**metadata[0], "test_case": {"input": str(one["inputs"][0]), "output": str(one["outputs"][0]),
                                                      "res": str(results)}})  # fmt: skip
    return passed / tried, per_case


__all__ = ["compute_score", "apps_check_correctness", "check_correctness", "remove_think_tags", "parse_test_cases"]
