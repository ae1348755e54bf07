"""SandboxFusionTool against a small /run_code server on loopback (real HTTP, scripted answers), and once against
the real local sandbox."""

import asyncio
import json
import pickle
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from verl.tools.sandbox_fusion_tools import EMPTY_OUTPUT_TEXT, SandboxFusionTool

SCHEMA = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "run code",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}


def finished(stdout="", stderr="", status="Finished", return_code=0):
    return {"status": "Success" if status == "Finished" and return_code == 0 else "Failed", "message": "",
            "compile_result": None,
            "run_result": {"status": status, "stdout": stdout, "stderr": stderr, "return_code": return_code,
                           "execution_time": 0.25}}


class FakeSandbox:
    """Answers by the code it gets: `sleep` holds the request 0.2 s (to count requests in flight), `hold` holds it
    until `hold_for` requests are in flight at once (or every one of `hold_total` has arrived), `timeout`, `crash`,
    `sandbox_error` and `http500` script the failure cases, anything else echoes."""

    HOLD_LIMIT_S = 120.0  # only a safety net for a broken tool: a correct one releases every hold on its own

    def __init__(self):
        self.requests, self.paths = [], []
        self.in_flight = self.max_in_flight = 0
        self.hold_for = self.hold_total = self.holds_arrived = 0
        self.holds_released_at: list[int] = []  # requests in flight when each held request's group was let go
        self.release_group = self.released_with = 0
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.requests.append(body)
                    fake.paths.append(self.path)
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                    fake.changed.notify_all()
                try:
                    status, answer = fake.answer(body["code"])
                finally:
                    with fake.lock:
                        fake.in_flight -= 1
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/run_code"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def hold(self):
        """Wait (on events, not on the clock) until `hold_for` requests are in flight together, then let that whole
        group go at once (a latch: a level test would strand the last waiter once the first released one left);
        once every held request has arrived, the last ones go without waiting for company that will not come."""
        with self.changed:
            self.holds_arrived += 1
            group = self.release_group
            if self.in_flight >= self.hold_for or self.holds_arrived >= self.hold_total:
                self.release_group += 1
                self.released_with = self.in_flight
                self.changed.notify_all()
            released = self.changed.wait_for(lambda: self.release_group != group, self.HOLD_LIMIT_S)
            self.holds_released_at.append(self.released_with if released else -1)

    def answer(self, code):
        if code == "hold":
            self.hold()
            return 200, finished(stdout="held\n")
        if code.startswith("sleep"):
            time.sleep(0.2)
            return 200, finished(stdout="slept\n")
        if code == "timeout":
            return 200, finished(stdout="partial\n", status="TimeLimitExceeded", return_code=None)
        if code == "crash":
            return 200, finished(stderr="Traceback...\nZeroDivisionError: division by zero\n", return_code=1)
        if code == "sandbox_error":
            return 200, {"status": "SandboxError", "message": "no runner free", "compile_result": None,
                         "run_result": None}
        if code == "http500":
            return 500, {"detail": "boom"}
        if code == "silent":
            return 200, finished()
        return 200, finished(stdout=f"ran {code}\n", stderr="warning: x\n")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def sandbox():
    with FakeSandbox() as fake:
        yield fake


def make_tool(url, **config):
    return SandboxFusionTool(config={"sandbox_fusion_url": url, **config}, tool_schema=SCHEMA)


def call(tool, parameters):
    async def once():
        iid, _ = await tool.create()
        try:
            return await tool.execute(iid, parameters)
        finally:
            await tool.release(iid)

    return asyncio.run(once())


def test_request_fields_and_output(sandbox):
    tool = make_tool(sandbox.url, default_timeout=7, memory_limit_mb=256, default_language="python")
    response, reward, metrics = call(tool, {"code": "print(1)"})
    assert response.text == "ran print(1)\nwarning: x"  # stdout, then stderr
    assert reward == 0.0 and metrics == {"sandbox_errors": 0, "timeouts": 0, "execution_time": 0.25}
    (request,) = sandbox.requests
    assert sandbox.paths == ["/run_code"]
    assert (request["code"], request["language"], request["run_timeout"], request["memory_limit_MB"]) == (
        "print(1)", "python", 7.0, 256)

    # A call may pick its language and lower the timeout, never raise it.
    call(tool, {"code": "x", "language": "bash", "timeout": 3})
    call(tool, {"code": "x", "timeout": 600})
    assert [(r["language"], r["run_timeout"]) for r in sandbox.requests[1:]] == [("bash", 3.0), ("python", 7.0)]


def test_non_string_and_empty_code(sandbox):
    tool = make_tool(sandbox.url)
    response, _, _ = call(tool, {"code": 12345})
    assert sandbox.requests[-1]["code"] == "12345" and response.text.startswith("ran 12345")
    for parameters in ({"code": None}, {}, {"code": "   "}, "not a dict"):
        response, _, metrics = call(tool, parameters)
        assert "no code given" in response.text and metrics["sandbox_errors"] == 0
    assert len(sandbox.requests) == 1  # nothing was sent for the empty ones
    assert call(tool, {"code": "silent"})[0].text == EMPTY_OUTPUT_TEXT


@pytest.mark.parametrize(
    ("code", "text", "errors", "timeouts"),
    [
        ("timeout", "partial\nTimeLimitExceeded: the code did not finish within 30 s.", 0, 1),
        ("crash", "Traceback...\nZeroDivisionError: division by zero", 0, 0),
        ("sandbox_error", "Sandbox error: no runner free", 1, 0),
    ],
)
def test_failed_runs_become_text(sandbox, code, text, errors, timeouts):
    response, reward, metrics = call(make_tool(sandbox.url), {"code": code})
    assert response.text == text and reward == 0.0
    assert (metrics["sandbox_errors"], metrics["timeouts"]) == (errors, timeouts)


def test_http_error_and_unreachable_sandbox_become_text(sandbox):
    response, _, metrics = call(make_tool(sandbox.url), {"code": "http500"})
    assert response.text.startswith("Sandbox error:") and "HTTP 500" in response.text
    assert metrics == {"sandbox_errors": 1, "timeouts": 0}

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/run_code"
    response, _, metrics = call(make_tool(dead), {"code": "print(1)"})
    assert response.text.startswith("Sandbox error: cannot reach the sandbox") and metrics["sandbox_errors"] == 1


def test_missing_url_is_refused_at_execute():
    tool = make_tool(None)  # building it is fine: the trainer fills the url in first
    with pytest.raises(ValueError, match="sandbox_fusion_url is empty"):
        call(tool, {"code": "print(1)"})


async def burst(tools, per_tool, code="sleep"):
    async def one(tool):
        iid, _ = await tool.create()
        return await tool.execute(iid, {"code": code})

    return await asyncio.gather(*(one(tool) for tool in tools for _ in range(per_tool)))


@pytest.mark.parametrize("num_workers", [3, 12])
def test_num_workers_bounds_calls_in_flight(sandbox, num_workers):
    # 12 is more than asyncio's default executor has threads on a small machine: the tool's own pool must not cap it.
    # Each request is held until num_workers are in flight together, however slowly a loaded box starts them: a
    # tool that allowed fewer would leave them held (the assertions below name that), one that allowed more would
    # be seen with more in flight.
    calls = 3 * num_workers
    sandbox.hold_for, sandbox.hold_total = num_workers, calls
    tool = make_tool(sandbox.url, num_workers=num_workers, rate_limit=20)
    results = asyncio.run(burst([tool], calls, code="hold"))
    assert [r[0].text for r in results] == ["held"] * calls
    assert len(sandbox.requests) == calls
    assert -1 not in sandbox.holds_released_at, "some requests were never joined by num_workers others"
    assert sandbox.max_in_flight == num_workers
    # the first num_workers went together, once all of them were in: the tool reached its bound
    assert sandbox.holds_released_at[0] == num_workers


def test_tool_pickles_after_use(sandbox):
    tool = make_tool(sandbox.url, num_workers=2)
    call(tool, {"code": "print(1)"})
    copy = pickle.loads(pickle.dumps(tool))
    assert copy.num_workers == 2 and copy.sandbox_fusion_url == sandbox.url
    assert call(copy, {"code": "print(2)"})[0].text == "ran print(2)\nwarning: x"


@pytest.mark.parametrize(("shared", "expected"), [(True, 2), (False, 4)])
def test_rate_limit_is_shared_by_tools_of_one_sandbox(sandbox, shared, expected):
    # Held requests wait (on events) until `expected` are in flight together, so the bound is reached however
    # slowly a loaded box starts them: a limit tighter than expected would leave holds unreleased (-1), a looser
    # one would show more in flight.
    sandbox.hold_for, sandbox.hold_total = expected, 8
    tools = [make_tool(sandbox.url, num_workers=5, rate_limit=2, enable_global_rate_limit=shared) for _ in range(2)]
    results = asyncio.run(burst(tools, 4, code="hold"))
    assert [r[0].text for r in results] == ["held"] * 8
    assert len(sandbox.requests) == 8
    assert -1 not in sandbox.holds_released_at
    assert sandbox.max_in_flight == expected and sandbox.holds_released_at[0] == expected


@pytest.mark.parametrize("key", ["num_workers", "rate_limit", "default_timeout", "memory_limit_mb"])
def test_bad_config_values(key):
    with pytest.raises(ValueError, match=f"config.{key} must be a positive"):
        make_tool("http://x/run_code", **{key: 0})


def test_against_the_local_sandbox():
    from verl.sandbox.local import LocalSandbox

    with LocalSandbox() as url:
        tool = make_tool(url, default_timeout=5)
        response, _, metrics = call(tool, {"code": "print(6 * 7)"})
        assert response.text == "42" and metrics["sandbox_errors"] == 0
        response, _, metrics = call(tool, {"code": "1 / 0"})
        assert "ZeroDivisionError" in response.text and metrics["sandbox_errors"] == 0
