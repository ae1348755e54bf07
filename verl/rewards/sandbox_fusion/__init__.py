"""Code-execution reward: a completion's Python code run against stdin/stdout tests in a SandboxFusion sandbox.

The sandbox is our own `python -m verl.tools.sandbox` or a real SandboxFusion deployment: only the URL differs.
Upstream's entry point and semantics: `compute_score(...) -> (score, metadata_list)`, score = the fraction of test
cases passed (with `continuous`, of the first 10).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from verl.rewards.sandbox_fusion.utils import check_correctness

CONTINUOUS_CASES = 10


def extract_code(completion: str) -> str:
    """The last ```python block, else the first ``` block (without a language line), else the whole text."""
    if "```python" in completion:
        return completion.split("```python")[-1].split("```")[0]
    if "```" in completion:
        block = completion.split("```")[1]
        first, _, rest = block.partition("\n")
        return rest if first.strip().isalpha() else block
    return completion


def parse_test_cases(test_cases: Any) -> dict[str, Any]:
    """The ground truth as a dict with "inputs" and "outputs" (and "fn_name" for call-based tests, when given);
    ValueError otherwise. Shared with prime_code."""
    if isinstance(test_cases, str | bytes):
        try:
            test_cases = json.loads(test_cases)
        except json.JSONDecodeError as err:
            raise ValueError(f"test_cases (the ground truth) is not valid JSON: {err}") from err
    if not isinstance(test_cases, dict) or "inputs" not in test_cases or "outputs" not in test_cases:
        raise ValueError(
            'test_cases (the ground truth) must be {"inputs": [...], "outputs": [...]} (optionally with "fn_name"), '
            f"or that as a JSON string; got {type(test_cases).__name__}"
        )
    cases = {"inputs": list(test_cases["inputs"]), "outputs": list(test_cases["outputs"])}
    if test_cases.get("fn_name"):
        cases["fn_name"] = str(test_cases["fn_name"])
    return cases


def compute_score(
    sandbox_fusion_url: str,
    concurrent_semaphore: threading.Semaphore | None,
    memory_limit_mb: int,
    completion: str,
    test_cases: Any,
    continuous: bool = False,
    timeout: float = 10,
) -> tuple[float, list[dict[str, Any]]]:
    """Score one completion; (fraction of passed cases, one metadata dict per case)."""
    cases = parse_test_cases(test_cases)
    if not cases["inputs"]:
        return 0.0, []
    if continuous:
        cases = {k: v[:CONTINUOUS_CASES] for k, v in cases.items()}
    results, metadata = check_correctness(
        sandbox_fusion_url,
        cases,
        extract_code(completion),
        timeout=timeout,
        memory_limit_mb=memory_limit_mb,
        concurrent_semaphore=concurrent_semaphore,
    )
    passed = sum(1 for r in results if r is True)
    return passed / len(results), metadata


__all__ = ["compute_score", "check_correctness", "extract_code", "parse_test_cases"]
