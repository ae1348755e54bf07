"""The service's ordinary behaviour over real HTTP: SandboxFusion's request and response format."""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request

import pytest

from tests.sandbox.helpers import (
    UNPRIVILEGED,
    assert_still_usable,
    skip_unless_possible,
    unprivileged_prefix,
    unprivileged_python,
)
from verl.sandbox.client import SandboxHTTPError, SandboxUnavailable, arun_code, run_code


def test_stdout_and_response_shape(sandbox_url):
    result = run_code(sandbox_url, "print('hello')\nimport sys; print('warn', file=sys.stderr)")
    assert result["status"] == "Success"
    assert result["compile_result"] is None
    run = result["run_result"]
    assert run["status"] == "Finished" and run["return_code"] == 0
    assert run["stdout"] == "hello\n" and run["stderr"] == "warn\n"
    assert 0 < run["execution_time"] < 10
    assert result["files"] == {}


def test_stdin_is_fed_to_the_program(sandbox_url):
    code = "import sys\nnums = [int(x) for x in sys.stdin.read().split()]\nprint(sum(nums))"
    result = run_code(sandbox_url, code, stdin="3 4\n5\n")
    assert result["run_result"]["stdout"] == "12\n"


def test_nonzero_exit_is_failed_with_its_code(sandbox_url):
    result = run_code(sandbox_url, "import sys; print('bye'); sys.exit(3)")
    assert result["status"] == "Failed"
    assert result["run_result"]["status"] == "Finished"
    assert result["run_result"]["return_code"] == 3
    assert result["run_result"]["stdout"] == "bye\n"


def test_syntax_error_is_failed_with_the_traceback(sandbox_url):
    result = run_code(sandbox_url, "def f(:\n  pass")
    assert result["status"] == "Failed"
    assert result["run_result"]["return_code"] == 1
    assert "SyntaxError" in result["run_result"]["stderr"]


def test_files_in_and_fetch_files_out(sandbox_url):
    blob = bytes(range(256))
    code = (
        "data = open('in/blob.bin', 'rb').read()\n"
        "open('out.bin', 'wb').write(data[::-1])\n"
        "print(len(data), open('notes.txt').read())"
    )
    result = run_code(
        sandbox_url,
        code,
        files={"in/blob.bin": blob, "notes.txt": b"hi there"},
        fetch_files=["out.bin", "never_written.txt"],
    )
    assert result["status"] == "Success", result
    assert result["run_result"]["stdout"] == "256 hi there\n"
    import base64

    assert base64.b64decode(result["files"]["out.bin"]) == blob[::-1]
    assert "never_written.txt" not in result["files"]
    assert "never_written.txt" in result["message"]


def test_fetch_files_does_not_follow_a_symlink_out_of_the_work_dir(sandbox_url):
    result = run_code(sandbox_url, "import os; os.symlink('/etc/hostname', 'leak')", fetch_files=["leak"])
    assert result["status"] == "Success"
    assert result["files"] == {}


def test_bash(sandbox_url):
    result = run_code(sandbox_url, 'read x; echo "got $x"; id -u', language="bash", stdin="7\n")
    assert result["status"] == "Success"
    assert result["run_result"]["stdout"] == "got 7\n65534\n"


@pytest.mark.parametrize(
    ("request_body", "fragment"),
    [
        ({"code": "print(1)", "language": "cpp"}, "language 'cpp' is not supported"),
        ({"code": "print(1)", "files": {"../escape.txt": "aGk="}}, "must be a relative path"),
        ({"code": "print(1)", "files": {"a.txt": "not base64!"}}, "files['a.txt'] is not valid base64"),
        ({"code": 5}, "code must be a string"),
        ({"code": "print(1)", "run_timeout": -1}, "run_timeout must be a positive number"),
    ],
)
def test_bad_requests_are_sandbox_errors(sandbox_url, request_body, fragment):
    req = urllib.request.Request(sandbox_url, data=json.dumps(request_body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=10) as response:
        result = json.loads(response.read())
    assert result["status"] == "SandboxError"
    assert fragment in result["message"]
    assert result["run_result"] is None


def test_non_json_body_is_an_http_error(sandbox_url):
    req = urllib.request.Request(sandbox_url, data=b"{not json", method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=10)
    assert info.value.code == 400


def test_unknown_endpoint_raises_sandbox_http_error(sandbox_url):
    with pytest.raises(SandboxHTTPError, match="HTTP 404"):
        run_code(sandbox_url.replace("/run_code", "/nope"), "print(1)")


def test_health(sandbox_url):
    health = sandbox_url.replace("/run_code", "/health")
    with urllib.request.urlopen(health, timeout=5) as response:
        assert response.status == 200
        assert json.loads(response.read()) == {"status": "ok"}


def test_async_client_runs_concurrently(sandbox_url):
    async def many():
        return await asyncio.gather(*(arun_code(sandbox_url, f"print({i} * {i})") for i in range(6)))

    results = asyncio.run(many())
    assert [r["run_result"]["stdout"] for r in results] == [f"{i * i}\n" for i in range(6)]


def test_unreachable_port_raises_sandbox_unavailable_quickly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Refused at once, not after the HTTP timeout: the reason is the refused connection (a timeout would say
    # "timed out"); no clock is read, as a loaded box can stretch any bound.
    with pytest.raises(SandboxUnavailable, match="cannot reach the sandbox") as info:
        run_code(f"http://127.0.0.1:{port}/run_code", "print(1)")
    assert "refused" in str(info.value).lower() and "timed out" not in str(info.value)
    assert issubclass(SandboxUnavailable, ConnectionError)


def test_service_refuses_to_start_without_unshare(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to get past the first check")
    env = {**os.environ, "PATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-m", "verl.tools.sandbox", "--port", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "refusing to start" in proc.stderr and "unshare" in proc.stderr
    assert "listening" not in proc.stdout


FAILING_UNSHARE = """#!/bin/sh
echo "unshare: unshare failed: Operation not permitted" >&2
exit 1
"""


def test_service_without_root_or_user_namespaces_refuses_and_says_which(tmp_path):
    skip_unless_possible(UNPRIVILEGED)
    python = unprivileged_python()
    if python is None:
        pytest.skip("no Python interpreter the unprivileged user can run with verl importable")
    # an `unshare` that fails the way it does where the kernel refuses user namespaces to ordinary users
    bin_dir = tempfile.mkdtemp(prefix="verl-fake-unshare-")
    try:
        fake = os.path.join(bin_dir, "unshare")
        with open(fake, "w") as f:
            f.write(FAILING_UNSHARE)
        os.chmod(fake, 0o755)
        os.chmod(bin_dir, 0o755)
        argv = [*unprivileged_prefix(python), "-m", "verl.tools.sandbox", "--port", "0"]
        env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(bin_dir, ignore_errors=True)
    assert proc.returncode == 2, proc.stderr
    assert "refusing to start" in proc.stderr
    assert "needs either root or unprivileged user namespaces, and has neither here" in proc.stderr
    assert "(not root)" in proc.stderr and "Operation not permitted" in proc.stderr
    assert "listening" not in proc.stdout


def test_the_service_is_usable_after_the_suite(sandbox_url):
    assert_still_usable(sandbox_url)
