"""`check_correctness`: run a program against APPS-style tests in a separate, confined process (upstream's name).

The program and the test driver (`_harness.py`) run together in one process started through verl's sandbox
(`verl.sandbox.runner.SandboxRunner`: fresh namespaces without network, user nobody, rlimits, a read-only view
of the filesystem, a wall clock). Where this machine cannot build that sandbox (no root and no unprivileged user
namespaces, e.g. a default Docker seccomp profile) the driver runs as a plain child process with the same
rlimits and wall clock, in its own session and temporary directory, and a warning says so once per process:
that protects against hangs and memory blow-ups, not against a program that means harm.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from verl.sandbox.isolation import IsolationError
from verl.sandbox.runner import Execution, SandboxRunner

logger = logging.getLogger(__name__)

_HARNESS = (Path(__file__).parent / "_harness.py").read_text()
# Starting the sandboxed interpreter and the driver's imports take time the program's own limit should not pay.
_START_GRACE_S = 3.0
_STDERR_KEEP = 4000
DEFAULT_MEMORY_LIMIT_MB = 1024


class PlainProcessRunner:
    """The fallback: the driver as a child process in its own session and temporary work dir, killed (with its
    whole process group) at the wall clock. The driver sets its own CPU, memory, file-size and core-dump rlimits."""

    def run(self, code: str, *, run_timeout: float, files: dict[str, bytes]) -> Execution:
        workdir = tempfile.mkdtemp(prefix="verl-prime-code-")
        try:
            for name, content in {**files, "main.py": code.encode()}.items():
                Path(workdir, name).write_bytes(content)
            env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": workdir, "TMPDIR": workdir,
                   "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}  # fmt: skip
            with tempfile.TemporaryFile(dir=workdir) as err:
                start = time.monotonic()
                proc = subprocess.Popen([sys.executable, "main.py"], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE, stderr=err, start_new_session=True)  # fmt: skip
                try:
                    out, _ = proc.communicate(timeout=run_timeout)
                    status = "Finished"
                except subprocess.TimeoutExpired:
                    # a run out of time scores nothing, so its partial output is not read: a child that left the
                    # process group could hold the pipe open forever
                    _kill_group(proc)
                    proc.stdout.close()
                    proc.wait()
                    out, status = b"", "TimeLimitExceeded"
                _kill_group(proc)
                err.seek(0)
                stderr = err.read().decode("utf-8", "replace")[-_STDERR_KEEP:]
            rc = None if status == "TimeLimitExceeded" else proc.returncode
            return Execution(status, time.monotonic() - start, rc, out.decode("utf-8", "replace"), stderr)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    # the program may have forked; its children share the session's process group
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_runners: dict[int, SandboxRunner | PlainProcessRunner] = {}
_runners_lock = threading.Lock()


def code_runner() -> SandboxRunner | PlainProcessRunner:
    """This process's runner: the sandbox when this machine can build it, else the plain child process.
    Keyed by pid, so a forked scoring process builds its own instead of sharing its parent's."""
    pid = os.getpid()
    with _runners_lock:
        if pid not in _runners:
            try:
                _runners[pid] = SandboxRunner()
            except IsolationError as err:
                logger.warning(
                    "prime_code: the code sandbox is not available here (%s); model-written programs run as plain "
                    "child processes with only CPU/memory limits and a wall clock. Run as root, or allow "
                    "unprivileged user namespaces, to confine them.", err,
                )  # fmt: skip
                _runners[pid] = PlainProcessRunner()
        return _runners[pid]


def _all_failed(count: int, why: str, execution: Execution | None = None) -> tuple[list[int], list[dict[str, Any]]]:
    meta: dict[str, Any] = {"error": why, "error_message": "Runtime Error"}
    if execution is not None:
        meta.update(status=execution.status, return_code=execution.return_code,
                    stderr=execution.stderr[-_STDERR_KEEP:])  # fmt: skip
        if execution.status == "TimeLimitExceeded":
            meta["error_message"] = "Time Limit Exceeded"
    return [-1] * max(count, 1), [meta]


def check_correctness(
    in_outs: dict[str, Any] | None,
    generation: str,
    timeout: float = 10,
    debug: bool = True,
    *,
    memory_limit_mb: int = DEFAULT_MEMORY_LIMIT_MB,
) -> tuple[list[bool | int], list[dict[str, Any]]]:
    """Run `generation` on `in_outs` ({"inputs": [...], "outputs": [...]}, plus "fn_name" for call-based tests).

    Returns (results, [metadata]): one entry per case tried, True / False (wrong answer) / -1 (runtime error or
    time limit) / -2 (does not compile, or lacks fn_name), stopping at the first case that does not pass;
    metadata describes that failure ({} when all pass). `timeout` is per case; the whole run gets that plus a
    few seconds to start, and a run killed by it (or crashing) scores -1 on every case, as upstream.
    """
    if not in_outs or "inputs" not in in_outs or "outputs" not in in_outs:
        raise ValueError('in_outs must be {"inputs": [...], "outputs": [...]} (plus "fn_name" for call-based tests)')
    count = len(in_outs["inputs"])
    if len(in_outs["outputs"]) != count:
        raise ValueError(f"in_outs has {count} inputs and {len(in_outs['outputs'])} outputs; give one of each per case")
    run_timeout = float(timeout) + _START_GRACE_S
    spec = {"in_outs": in_outs, "timeout": float(timeout), "cpu_seconds": run_timeout, "memory_mb": int(memory_limit_mb),
            "debug": bool(debug)}  # fmt: skip
    files = {"spec.json": json.dumps(spec).encode(), "solution.py": generation.encode()}
    runner = code_runner()
    if isinstance(runner, SandboxRunner):
        # the sandbox also caps the run's cgroup memory; the driver's own RLIMIT_AS applies in both modes
        execution = runner.run(_HARNESS, run_timeout=run_timeout, memory_limit_mb=memory_limit_mb, files=files)
    else:
        execution = runner.run(_HARNESS, run_timeout=run_timeout, files=files)
    if debug:
        logger.warning("prime_code: driver %s rc=%s stderr=%s", execution.status, execution.return_code,
                       execution.stderr[-_STDERR_KEEP:])  # fmt: skip
    if execution.status != "Finished":
        return _all_failed(count, f"the run ended with {execution.status}: {execution.message}".strip(), execution)
    try:
        report = json.loads(execution.stdout.strip().splitlines()[-1])
        results, metadata = list(report["results"]), dict(report["metadata"])
    except (IndexError, ValueError, KeyError, TypeError):
        return _all_failed(count, "the program's process ended without a report (crash, memory limit or exit)",
                           execution)  # fmt: skip
    return results, [metadata]


__all__ = ["check_correctness", "code_runner", "PlainProcessRunner", "DEFAULT_MEMORY_LIMIT_MB"]
