"""A SandboxFusion-compatible HTTP service over `SandboxRunner`: POST /run_code, GET /health (and /v1/ping).

Request and response follow SandboxFusion's `/run_code`, so a client written for a real deployment works
unchanged against this one. Standard library only (ThreadingHTTPServer); a semaphore bounds how many programs
run at once, and requests beyond that wait for a slot.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from verl.sandbox.runner import Execution, SandboxInputError, SandboxRunner
from verl.utils.json_http import json_reply

logger = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 64 << 20
MAX_RUN_TIMEOUT_S = 600.0


def _error_response(message: str) -> dict[str, Any]:
    return {"status": "SandboxError", "message": message, "compile_result": None, "run_result": None, "files": {}}


def _number(request: dict, key: str, default: float, upper: float | None = None) -> float:
    value = request.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise SandboxInputError(f"{key} must be a positive number, got {value!r}")
    return min(float(value), upper) if upper else float(value)


def _decode_files(files: Any) -> dict[str, bytes]:
    if files is None:
        return {}
    if not isinstance(files, dict):
        raise SandboxInputError("files must be an object mapping file names to base64 contents")
    decoded = {}
    for name, content in files.items():
        if content is None:
            continue
        try:
            decoded[name] = base64.b64decode(content, validate=True)
        except (binascii.Error, TypeError, ValueError) as err:
            raise SandboxInputError(f"files[{name!r}] is not valid base64: {err}") from err
    return decoded


def handle_run_code(runner: SandboxRunner, request: Any) -> dict[str, Any]:
    """Turn one /run_code request into SandboxFusion's response; malformed requests become SandboxError."""
    if not isinstance(request, dict):
        return _error_response("the request body must be a JSON object")
    code = request.get("code")
    if not isinstance(code, str):
        return _error_response("code must be a string")
    language = request.get("language") or "python"
    stdin = request.get("stdin")
    if stdin is not None and not isinstance(stdin, str):
        return _error_response("stdin must be a string")
    fetch = request.get("fetch_files") or []
    try:
        if not isinstance(fetch, list) or not all(isinstance(n, str) for n in fetch):
            raise SandboxInputError("fetch_files must be a list of file names")
        execution = runner.run(
            code,
            language=str(language),
            run_timeout=_number(request, "run_timeout", 10.0, MAX_RUN_TIMEOUT_S),
            memory_limit_mb=int(_number(request, "memory_limit_MB", runner.limits.memory_mb)),
            stdin=stdin,
            files=_decode_files(request.get("files")),
            fetch_files=fetch,
        )
    except SandboxInputError as err:
        return _error_response(str(err))
    return _response(execution)


def _response(execution: Execution) -> dict[str, Any]:
    if execution.status == "Error":
        status = "SandboxError"
    elif execution.status == "Finished" and execution.return_code == 0:
        status = "Success"
    else:
        status = "Failed"
    return {
        "status": status,
        "message": execution.message,
        "compile_result": None,
        "run_result": execution.run_result(),
        "files": {name: base64.b64encode(data).decode() for name, data in execution.files.items()},
    }


class _Handler(BaseHTTPRequestHandler):
    server: SandboxHTTPServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        logger.debug("%s " + format, self.address_string(), *args)

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        json_reply(self, code, payload)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") in ("/health", "/v1/ping"):
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"error": f"no such endpoint {self.path}; use POST /run_code or GET /health"})

    def do_POST(self) -> None:  # noqa: N802
        if self.path.rstrip("/") not in ("/run_code", "/v1/run_code"):
            self._send(404, {"error": f"no such endpoint {self.path}; use POST /run_code"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            self.close_connection = True
            self._send(413, {"error": f"request body over {MAX_REQUEST_BYTES} bytes"})
            return
        try:
            request = json.loads(self.rfile.read(length) or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            self._send(400, {"error": f"the request body is not JSON: {err}"})
            return
        with self.server.tracking_request():
            with self.server.slots:
                try:
                    payload = handle_run_code(self.server.runner, request)
                except Exception as err:  # noqa: BLE001 - one broken run must not take the service down
                    logger.exception("sandbox run failed")
                    payload = _error_response(f"internal sandbox error: {type(err).__name__}: {err}")
            self._send(200, payload)


class SandboxHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, runner: SandboxRunner, host: str = "127.0.0.1", port: int = 0, max_concurrency: int = 1):
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {max_concurrency}")
        self.runner = runner
        self.slots = threading.BoundedSemaphore(max_concurrency)
        self._requests = 0
        self._requests_done = threading.Condition()
        super().__init__((host, port), _Handler)

    @contextlib.contextmanager
    def tracking_request(self):
        with self._requests_done:
            self._requests += 1
        try:
            yield
        finally:
            with self._requests_done:
                self._requests -= 1
                self._requests_done.notify_all()

    def drain(self, timeout: float = 10.0) -> None:
        """Kill the programs still running and let their requests send the (killed) answer before we exit."""
        self.runner.close(timeout)
        with self._requests_done:
            self._requests_done.wait_for(lambda: self._requests == 0, timeout=timeout)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/run_code"


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGTERM/SIGINT; print one line with the URL first (LocalSandbox waits for it)."""
    import argparse
    import os
    import signal
    import sys

    from verl.sandbox.isolation import IsolationError, Limits

    parser = argparse.ArgumentParser(prog="python -m verl.tools.sandbox", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind; loopback unless you mean otherwise")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--max-concurrency", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--python", default=None, help="interpreter for python code (default: this one)")
    parser.add_argument("--memory-limit-mb", type=int, default=Limits.memory_mb, help="default per-run memory")
    parser.add_argument("--max-processes", type=int, default=Limits.pids, help="pids.max per run")
    parser.add_argument("--output-limit-bytes", type=int, default=1 << 20, help="cap on stdout and on stderr")
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")

    limits = Limits(memory_mb=args.memory_limit_mb, pids=args.max_processes)
    try:
        runner = SandboxRunner(python=args.python, limits=limits, output_limit=args.output_limit_bytes)
    except IsolationError as err:
        print(f"sandbox: refusing to start: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    server = SandboxHTTPServer(runner, args.host, args.port, args.max_concurrency)

    def stop(signum: int, frame: Any) -> None:
        # shutdown() waits for serve_forever to return, so it must run off the serving thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"sandbox listening on {server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.drain()
        server.server_close()
