"""Stopping the service, gracefully or by SIGKILL, takes the programs still running with it: as root and as an
unprivileged user (user namespaces)."""

import glob
import os
import signal
import threading
import time
import uuid

import psutil
import pytest

from tests.sandbox.helpers import MODES, make_sandbox, program_uid
from verl.sandbox.client import SandboxUnavailable, run_code


def _with_argv0(token: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if (proc.info.get("cmdline") or [None])[0] == token:
            found.append(proc)
    return found


def _wait_for(predicate, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_stopping_the_service_kills_running_programs(how, mode):
    token = f"verl-sandbox-sleeper-{uuid.uuid4().hex[:8]}"
    sandbox = make_sandbox(mode, max_concurrency=2)
    url = sandbox.start()
    outcome = {}

    def call():
        try:
            outcome["result"] = run_code(url, f"exec -a {token} sleep 120", language="bash", run_timeout=120)
        except (SandboxUnavailable, OSError) as err:
            outcome["error"] = err

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    try:
        assert _wait_for(lambda: _with_argv0(token), 15), "the program never started"
        assert _with_argv0(token)[0].uids().real == program_uid(mode)
        if how == "sigkill":
            os.kill(sandbox.proc.pid, signal.SIGKILL)
        else:
            sandbox.proc.send_signal(signal.SIGTERM)
        assert _wait_for(lambda: not _with_argv0(token), 10), "the program outlived the service"
        service_pid = sandbox.proc.pid
    finally:
        sandbox.stop()
    caller.join(timeout=10)
    assert not caller.is_alive()
    if how == "sigterm":  # a graceful stop still answers the request it interrupted
        assert outcome["result"]["status"] in ("Failed", "SandboxError"), outcome
    else:
        assert isinstance(outcome["error"], SandboxUnavailable), outcome
    leftovers = glob.glob(f"/tmp/verl-sandbox-{service_pid}-*") + glob.glob(
        f"/sys/fs/cgroup/*/verl-sandbox-{service_pid}-*"
    )
    if how == "sigterm":
        assert leftovers == [], "a gracefully stopped service must remove its work dirs and cgroups"
    else:
        assert glob.glob(f"/tmp/verl-sandbox-{service_pid}-*"), "expected the killed service's work dir"
        with make_sandbox(mode):  # the next service sweeps what a killed one left behind
            pass
        assert glob.glob(f"/tmp/verl-sandbox-{service_pid}-*") == []
        assert glob.glob(f"/sys/fs/cgroup/*/verl-sandbox-{service_pid}-*") == []
