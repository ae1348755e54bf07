"""Call a SandboxFusion `/run_code` endpoint (ours, or a real deployment) with the standard library.

`run_code(url, code, ...)` returns the response JSON as a dict; `arun_code` is the same in a worker thread, so an
asyncio caller (a tool, the agent loop) never blocks its event loop. A service that cannot be reached raises
`SandboxUnavailable`; an HTTP error status raises `SandboxHTTPError` with the status and the body's start.
"""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import urllib.error
import urllib.request
from typing import Any

# The HTTP timeout is the run's own limit plus this much for queueing behind other runs and for the transfer.
REQUEST_SLACK_S = 30.0


class SandboxUnavailable(ConnectionError):
    """The sandbox service could not be reached (refused, unresolvable, or no answer in time)."""


class SandboxHTTPError(RuntimeError):
    """The sandbox answered with an HTTP error status."""

    def __init__(self, url: str, status: int, body: str):
        self.status = status
        self.body = body
        super().__init__(f"sandbox at {url} answered HTTP {status}: {body[:500]}")


def _payload(
    code: str,
    language: str,
    run_timeout: float,
    compile_timeout: float,
    memory_limit_mb: int,
    stdin: str | None,
    files: dict[str, str | bytes] | None,
    fetch_files: list[str] | None,
) -> bytes:
    encoded = {}
    for name, content in (files or {}).items():
        # Bytes are raw contents; strings are taken as already base64, which is what SandboxFusion sends.
        encoded[name] = base64.b64encode(content).decode() if isinstance(content, bytes) else content
    return json.dumps(
        {
            "code": code,
            "language": language,
            "run_timeout": run_timeout,
            "compile_timeout": compile_timeout,
            "memory_limit_MB": memory_limit_mb,
            "stdin": stdin or "",
            "files": encoded,
            "fetch_files": list(fetch_files or []),
        }
    ).encode()


def run_code(
    url: str,
    code: str,
    *,
    language: str = "python",
    run_timeout: float = 10.0,
    compile_timeout: float = 10.0,
    memory_limit_mb: int = 1024,
    stdin: str | None = None,
    files: dict[str, str | bytes] | None = None,
    fetch_files: list[str] | None = None,
    request_timeout: float | None = None,
) -> dict[str, Any]:
    """POST one program to `url` (the full /run_code URL) and return SandboxFusion's response JSON."""
    body = _payload(code, language, run_timeout, compile_timeout, memory_limit_mb, stdin, files, fetch_files)
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json", "Accept": "application/json"}
    )
    timeout = request_timeout or (run_timeout + compile_timeout + REQUEST_SLACK_S)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            raw = response.read()
    except urllib.error.HTTPError as err:
        raise SandboxHTTPError(url, err.code, err.read().decode("utf-8", "replace")) from err
    # http.client.HTTPException: the service went away mid-answer (e.g. IncompleteRead while it stopped).
    except (urllib.error.URLError, ConnectionError, TimeoutError, http.client.HTTPException) as err:
        reason = getattr(err, "reason", err)
        raise SandboxUnavailable(
            f"cannot reach the sandbox at {url}: {reason}. Start one with `python -m verl.tools.sandbox` or point "
            "the url at a SandboxFusion deployment"
        ) from err
    try:
        return json.loads(raw)
    except json.JSONDecodeError as err:
        raise SandboxHTTPError(url, 200, f"response is not JSON: {raw[:200]!r}") from err


async def arun_code(
    url: str,
    code: str,
    *,
    language: str = "python",
    run_timeout: float = 10.0,
    compile_timeout: float = 10.0,
    memory_limit_mb: int = 1024,
    stdin: str | None = None,
    files: dict[str, str | bytes] | None = None,
    fetch_files: list[str] | None = None,
    request_timeout: float | None = None,
) -> dict[str, Any]:
    """`run_code` without blocking the event loop."""
    return await asyncio.to_thread(
        run_code,
        url,
        code,
        language=language,
        run_timeout=run_timeout,
        compile_timeout=compile_timeout,
        memory_limit_mb=memory_limit_mb,
        stdin=stdin,
        files=files,
        fetch_files=fetch_files,
        request_timeout=request_timeout,
    )
