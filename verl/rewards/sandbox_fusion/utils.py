"""Run a program against stdin/stdout test cases in a SandboxFusion service, one request per case.

`check_correctness` returns upstream's per-case codes: True (passed), False (wrong answer), -1 (sandbox or API
error), -2 (runtime error: nonzero exit, killed), -3 (time limit), -4 (compile error), and one metadata dict per
case with what the sandbox answered.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.sandbox.client import SandboxHTTPError, run_code

DEFAULT_TIMEOUT = 10
MAX_CASE_THREADS = 16


def outputs_match(actual: str, expected: str) -> bool:
    """Equal up to trailing whitespace on each line and trailing blank lines (judges accept a missing newline)."""

    def norm(text: str) -> list[str]:
        lines = [line.rstrip() for line in str(text).replace("\r\n", "\n").split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    return norm(actual) == norm(expected)


def _classify(response: dict[str, Any], expected: str) -> tuple[bool | int, str]:
    status = response.get("status")
    compile_result = response.get("compile_result") or {}
    run_result = response.get("run_result") or {}
    if status == "SandboxError":
        return -1, "sandbox_error"
    if compile_result and (
        compile_result.get("status") in ("Error", "TimeLimitExceeded")
        or (compile_result.get("status") == "Finished" and compile_result.get("return_code") not in (0, None))
    ):
        return -4, "compile_timeout" if compile_result.get("status") == "TimeLimitExceeded" else "compile_error"
    if run_result.get("status") == "TimeLimitExceeded":
        return -3, "timeout"
    if status == "Failed" or run_result.get("status") == "Error" or run_result.get("return_code") not in (0, None):
        return -2, "runtime_error"
    if status == "Success" and run_result.get("status") == "Finished":
        if outputs_match(run_result.get("stdout") or "", expected):
            return True, "success"
        return False, "wrong_answer"
    return -1, f"unknown_api_status_{status}"


def _run_case(
    url: str,
    code: str,
    index: int,
    stdin: Any,
    expected: Any,
    timeout: float,
    memory_limit_mb: int,
    language: str,
    semaphore: threading.Semaphore | None,
) -> tuple[bool | int, dict[str, Any]]:
    meta: dict[str, Any] = {"case_index": index, "input": str(stdin), "expected_output": str(expected)}
    try:
        if semaphore is not None:
            with semaphore:
                response = run_code(
                    url, code, language=language, run_timeout=timeout, compile_timeout=timeout,
                    memory_limit_mb=memory_limit_mb, stdin=str(stdin),
                )  # fmt: skip
        else:
            response = run_code(
                url, code, language=language, run_timeout=timeout, compile_timeout=timeout,
                memory_limit_mb=memory_limit_mb, stdin=str(stdin),
            )  # fmt: skip
    except SandboxHTTPError as err:
        # The service answered, but not with a result: this case counts as failed, and says why.
        meta.update(status="api_error", api_request_error=str(err))
        return -1, meta
    result, status = _classify(response, str(expected))
    run_result = response.get("run_result") or {}
    meta.update(
        status=status,
        api_status=response.get("status"),
        run_status=run_result.get("status"),
        stdout=run_result.get("stdout"),
        stderr=run_result.get("stderr"),
        exit_code=run_result.get("return_code"),
        duration=run_result.get("execution_time"),
    )
    return result, meta


def check_correctness(
    sandbox_fusion_url: str,
    in_outs: dict[str, list],
    generation: str,
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit_mb: int = 1024,
    language: str = "python",
    concurrent_semaphore: threading.Semaphore | None = None,
) -> tuple[list[bool | int], list[dict[str, Any]]]:
    """Run `generation` once per test case, concurrently; results and metadata in the order of the inputs.

    SandboxUnavailable (the service cannot be reached) propagates: that is a setup error, not a wrong answer.
    """
    inputs, outputs = in_outs["inputs"], in_outs["outputs"]
    if len(inputs) != len(outputs):
        raise ValueError(
            f"test cases have {len(inputs)} inputs but {len(outputs)} outputs; each input needs its expected output"
        )
    if not inputs:
        return [], []
    with ThreadPoolExecutor(max_workers=min(MAX_CASE_THREADS, len(inputs))) as pool:
        futures = [
            pool.submit(
                _run_case,
                sandbox_fusion_url,
                generation,
                i,
                stdin,
                expected,
                timeout,
                memory_limit_mb,
                language,
                concurrent_semaphore,
            )  # fmt: skip
            for i, (stdin, expected) in enumerate(zip(inputs, outputs))
        ]
        pairs = [f.result() for f in futures]
    return [p[0] for p in pairs], [p[1] for p in pairs]
