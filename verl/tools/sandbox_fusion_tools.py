"""SandboxFusionTool (``code_interpreter``): runs model-written code in a SandboxFusion-compatible service.

The service is either a real SandboxFusion deployment (``sandbox_fusion_url`` points at its ``/run_code``) or the
local one this library ships (``python -m verl.tools.sandbox``); when the YAML leaves the url empty, the trainer
starts the local service and fills the url in before the tools are built.

Config fields (upstream's names and defaults):

- ``sandbox_fusion_url``: the service's ``/run_code`` url.
- ``num_workers`` (10): the threads of this tool's execution pool, so at most this many of its calls in flight.
- ``rate_limit`` (10): at most this many calls in flight to one sandbox url, shared by every SandboxFusionTool of
  this process when ``enable_global_rate_limit`` (True), else per tool. Upstream bounds concurrency (a semaphore held
  by a Ray actor), not calls per second; so does this. Here the sharing is per process, not per cluster.
- ``default_timeout`` (30): run time limit in seconds; a call's own ``timeout`` argument may lower it, never raise it.
- ``default_language`` ("python"), ``memory_limit_mb`` (1024).

Whatever happens in the sandbox, or to the connection to it, becomes text for the model and a count in the call's
metrics (``sandbox_errors``, ``timeouts``), never an exception: a trajectory must survive its own bad code.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.sandbox.client import SandboxHTTPError, SandboxUnavailable, run_code
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["SandboxFusionTool"]

logger = logging.getLogger(__name__)

EMPTY_OUTPUT_TEXT = "(no output)"


class _LoopSemaphores:
    """An asyncio.Semaphore per event loop: a semaphore is bound to the loop it first waits in, and tools outlive
    loops (each ``asyncio.run`` makes a new one)."""

    def __init__(self, value: int):
        self.value = value
        self._by_loop: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def get(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        semaphore = self._by_loop.get(loop)
        if semaphore is None:
            semaphore = self._by_loop[loop] = asyncio.Semaphore(self.value)
        return semaphore


# sandbox url -> the limit every tool of this process shares for it (enable_global_rate_limit).
_GLOBAL_LIMITS: dict[str, _LoopSemaphores] = {}


def _global_limit(url: str, rate_limit: int) -> _LoopSemaphores:
    limit = _GLOBAL_LIMITS.get(url)
    if limit is None:
        limit = _GLOBAL_LIMITS[url] = _LoopSemaphores(rate_limit)
    elif limit.value != rate_limit:
        logger.warning("sandbox %s: rate_limit %d ignored, the first tool set the shared limit to %d",
                       url, rate_limit, limit.value)
    return limit


def _positive_int(config: dict, key: str, default: int) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"SandboxFusionTool config.{key} must be a positive integer, got {value!r}")
    return value


def _positive_number(config: dict, key: str, default: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"SandboxFusionTool config.{key} must be a positive number, got {value!r}")
    return float(value)


def _format_seconds(seconds: float) -> str:
    return f"{seconds:g}"


def render_run_result(result: dict[str, Any], timeout: float) -> tuple[str, dict[str, Any]]:
    """(text for the model, metrics) from a /run_code response."""
    metrics: dict[str, Any] = {"sandbox_errors": 0, "timeouts": 0}
    if not isinstance(result, dict):
        metrics["sandbox_errors"] = 1
        return f"Sandbox error: unexpected response {result!r:.200}", metrics
    compile_result = result.get("compile_result") or {}
    if compile_result and (compile_result.get("status") != "Finished" or compile_result.get("return_code")):
        output = (compile_result.get("stdout") or "") + (compile_result.get("stderr") or "")
        return f"Compilation failed:\n{output}".rstrip("\n"), metrics
    run = result.get("run_result")
    if result.get("status") == "SandboxError" or not isinstance(run, dict):
        metrics["sandbox_errors"] = 1
        return f"Sandbox error: {result.get('message') or 'the sandbox could not run the code'}", metrics
    if run.get("execution_time") is not None:
        metrics["execution_time"] = float(run["execution_time"])
    output = ((run.get("stdout") or "") + (run.get("stderr") or "")).strip("\n")
    status, note = run.get("status"), ""
    if status == "TimeLimitExceeded":
        metrics["timeouts"] = 1
        note = f"TimeLimitExceeded: the code did not finish within {_format_seconds(timeout)} s."
    elif status != "Finished":
        note = f"Error: the run did not finish (status {status}, return code {run.get('return_code')})."
    text = "\n".join(part for part in (output, note) if part)
    return (text or EMPTY_OUTPUT_TEXT), metrics


# The url of the sandbox service a trainer started itself (verl.trainer.ppo.sandbox_service).
LOCAL_SANDBOX_ENV = "VERL_SANDBOX_FUSION_URL"


class SandboxFusionTool(BaseTool):
    """``code_interpreter(code)``: runs ``code`` and answers with its stdout and stderr."""

    def __init__(self, config: dict[str, Any] | None, tool_schema: OpenAIFunctionToolSchema | dict | None):
        super().__init__(config, tool_schema)
        # empty in the YAML: the sandbox the trainer started for this run (it exports its url before Ray starts)
        self.sandbox_fusion_url: str = self.config.get("sandbox_fusion_url") or os.environ.get(LOCAL_SANDBOX_ENV, "")
        self.num_workers = _positive_int(self.config, "num_workers", 10)
        self.rate_limit = _positive_int(self.config, "rate_limit", 10)
        self.default_timeout = _positive_number(self.config, "default_timeout", 30)
        self.default_language: str = self.config.get("default_language", "python")
        self.memory_limit_mb = _positive_int(self.config, "memory_limit_mb", 1024)
        self.enable_global_rate_limit = bool(self.config.get("enable_global_rate_limit", True))
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._workers = _LoopSemaphores(self.num_workers)
        self._local_limit = _LoopSemaphores(self.rate_limit)
        self._pool: ThreadPoolExecutor | None = None  # made on first use

    def __getstate__(self) -> dict[str, Any]:
        # Locks and threads don't travel (to a Ray worker, say); the copy makes its own.
        state = self.__dict__.copy()
        for key in ("_workers", "_local_limit", "_pool"):
            state.pop(key)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def _executor(self) -> ThreadPoolExecutor:
        # Its own pool: asyncio's default executor has only min(32, cores + 4) threads, shared with everything else.
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.num_workers, thread_name_prefix=f"{self.name}-sandbox")
        return self._pool

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        if not self.sandbox_fusion_url:
            raise ValueError(
                f"{self.name}: sandbox_fusion_url is empty. Set it in the tool config YAML, or let the trainer start "
                "the local sandbox (it fills the url in before building tools); a tool built by hand needs "
                "`with LocalSandbox() as url:` (verl.sandbox.local) and config={'sandbox_fusion_url': url}"
            )
        parameters = parameters if isinstance(parameters, dict) else {}
        code = parameters.get("code", "")
        if not isinstance(code, str):
            code = "" if code is None else str(code)
        language = parameters.get("language") or self.default_language
        timeout = self._call_timeout(parameters.get("timeout"))
        if not code.strip():
            return ToolResponse(text="Error: no code given; call code_interpreter with a non-empty `code`."), 0.0, {
                "sandbox_errors": 0, "timeouts": 0}

        async with self._workers.get(), self._limit().get():
            text, metrics = await self._run(code, str(language), timeout)
        return ToolResponse(text=text), 0.0, metrics

    def _limit(self) -> _LoopSemaphores:
        if self.enable_global_rate_limit:
            return _global_limit(self.sandbox_fusion_url, self.rate_limit)
        return self._local_limit

    def _call_timeout(self, requested: Any) -> float:
        if isinstance(requested, (int, float)) and not isinstance(requested, bool) and requested > 0:
            return min(float(requested), self.default_timeout)
        return self.default_timeout

    async def _run(self, code: str, language: str, timeout: float) -> tuple[str, dict[str, Any]]:
        try:
            call = functools.partial(run_code, self.sandbox_fusion_url, code, language=language, run_timeout=timeout,
                                     memory_limit_mb=self.memory_limit_mb)
            result = await asyncio.get_running_loop().run_in_executor(self._executor(), call)
        except (SandboxUnavailable, SandboxHTTPError) as exc:
            # The service's trouble, not the model's: it still goes back as text so the trajectory goes on.
            logger.warning("%s: sandbox call failed: %s", self.name, exc)
            return f"Sandbox error: {exc}", {"sandbox_errors": 1, "timeouts": 0}
        return render_run_result(result, timeout)
