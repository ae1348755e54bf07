"""Run a program against stdin/stdout test cases in a SandboxFusion service, one request per case.

`check_correctness` returns upstream's per-case codes: True (passed), False (wrong answer), -1 (sandbox or API
error), -2 (runtime error: nonzero exit, killed), -3 (time limit), -4 (compile error), and one metadata dict per
case with what the sandbox answered.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.sandbox.client import SandboxHTTPError, SandboxUnavailable, run_code

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 10
MAX_CASE_THREADS = 16
# Upstream's retry policy for a gateway timeout (HTTP 504) in front of a busy SandboxFusion: 3 tries, 1 s then 2 s.
API_MAX_TRIES = 3
API_FIRST_RETRY_DELAY = 1.0


class SandboxCallError(str):
    """call_sandbox_api's error message (a plain str to callers, as upstream's). When the service could not be
    reached at all, `unreachable` holds that exception, so check_correctness can raise it as the setup error it is
    instead of scoring every case -1."""

    unreachable: Exception | None = None

    @classmethod
    def of(cls, message: str, unreachable: Exception | None = None) -> SandboxCallError:
        error = cls(message)
        error.unreachable = unreachable
        return error


def call_sandbox_api(
    sandbox_fusion_url: str,
    code: str,
    stdin: str | None,
    compile_timeout: float,
    run_timeout: float,
    memory_limit_mb: int,
    language: str = "python",
) -> tuple[dict[str, Any] | None, str | None]:
    """One /run_code request: (the sandbox's response JSON, None), or (None, what went wrong).

    As upstream, failures are returned, not raised: an unreachable service or a malformed URL, an HTTP error, or
    a 504 gateway timeout that persists after ``API_MAX_TRIES`` tries (1 s, then 2 s apart).
    """
    if urllib.parse.urlsplit(str(sandbox_fusion_url)).scheme not in ("http", "https"):
        # urllib would raise "unknown url type" for it; no request can be sent, so no retry either
        bad_url = ValueError(f"sandbox_fusion_url={sandbox_fusion_url!r} is not an http(s) URL of the sandbox's "
                             "/run_code endpoint (e.g. http://localhost:8080/run_code)")
        return None, SandboxCallError.of(f"API request failed: {bad_url}", unreachable=bad_url)
    delay = API_FIRST_RETRY_DELAY
    for attempt in range(1, API_MAX_TRIES + 1):
        try:
            response = run_code(
                sandbox_fusion_url, code, language=language, run_timeout=run_timeout,
                compile_timeout=compile_timeout, memory_limit_mb=memory_limit_mb, stdin=stdin,
            )  # fmt: skip
            return response, None
        except SandboxHTTPError as err:
            if err.status != 504 or attempt == API_MAX_TRIES:
                return None, SandboxCallError.of(f"API request failed after {attempt} attempt(s): {err}")
        except SandboxUnavailable as err:
            return None, SandboxCallError.of(f"API request failed: {err}", unreachable=err)
        time.sleep(delay)
        delay *= 2
    return None, "API request failed"  # unreachable: the loop returns on its last try


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
    # Looked up on the module at call time, by keyword, as upstream calls it: tests (upstream's too) patch
    # `...sandbox_fusion.utils.call_sandbox_api` to stand in for the service.
    request = dict(sandbox_fusion_url=url, code=code, stdin=str(stdin), compile_timeout=timeout, run_timeout=timeout,
                   memory_limit_mb=memory_limit_mb, language=language)
    if semaphore is not None:
        with semaphore:
            response, error = call_sandbox_api(**request)
    else:
        response, error = call_sandbox_api(**request)
    if response is None:
        unreachable = getattr(error, "unreachable", None)
        if unreachable is not None:
            raise unreachable
        # The service answered, but not with a result: this case counts as failed, and says why.
        meta.update(status="api_error", api_request_error=error)
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
    in_outs: dict[str, list] | None,
    generation: str,
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit_mb: int = 1024,
    language: str = "python",
    concurrent_semaphore: threading.Semaphore | None = None,
) -> tuple[list[bool | int], list[dict[str, Any]]]:
    """Run `generation` once per test case, concurrently; results and metadata in the order of the inputs.

    As upstream, bad test data is a score, not an exception: `in_outs` without "inputs"/"outputs" gives
    ([-1], [{"error": "Invalid input/output data"}]); unequal counts give -1 per input with "Input/output count
    mismatch". An unreachable service (SandboxUnavailable) or an unusable URL (ValueError) propagates: that is a
    setup error, not a wrong answer.
    """
    if not in_outs or not isinstance(in_outs, Mapping) or "inputs" not in in_outs or "outputs" not in in_outs:
        logger.warning("check_correctness: in_outs must be {'inputs': [...], 'outputs': [...]}, got %r", in_outs)
        return [-1], [{"error": "Invalid input/output data"}]
    inputs, outputs = in_outs["inputs"], in_outs["outputs"]
    if len(inputs) != len(outputs):
        logger.warning("check_correctness: %d inputs but %d outputs; each input needs its expected output",
                       len(inputs), len(outputs))
        return [-1] * len(inputs), [{"error": "Input/output count mismatch", "case_index": i}
                                    for i in range(len(inputs))]
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
