"""Run one piece of code in the sandbox: a fresh work dir, the confined process, capped output, a wall clock.

`SandboxRunner(...).run(code, language=..., ...)` returns an `Execution` whose fields are SandboxFusion's
`run_result`. The runner refuses to start (IsolationError) when its probe shows the isolation is not in force.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace

from verl.sandbox.isolation import (
    IsolationError,
    Limits,
    PidsCgroup,
    Spec,
    check_host,
    interpreter_roots,
    nobody_ids,
    sandbox_argv,
)

logger = logging.getLogger(__name__)

DEFAULT_OUTPUT_LIMIT = 1 << 20
LANGUAGES = {"python": "main.py", "bash": "main.sh"}
_KILL_GRACE_S = 2.0
_PREFIX = "verl-sandbox-"


class SandboxInputError(ValueError):
    """The request is malformed (unknown language, a file name escaping the work dir, ...)."""


@dataclass
class Execution:
    status: str  # Finished | TimeLimitExceeded | Error
    execution_time: float
    return_code: int | None
    stdout: str
    stderr: str
    truncated: dict[str, bool] = field(default_factory=dict)
    files: dict[str, bytes] = field(default_factory=dict)
    message: str = ""

    def run_result(self) -> dict:
        return {
            "status": self.status,
            "execution_time": round(self.execution_time, 4),
            "return_code": self.return_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
        }


def _check_name(name: str) -> str:
    norm = os.path.normpath(name)
    if not name or os.path.isabs(name) or norm == ".." or norm.startswith("../") or norm == ".":
        raise SandboxInputError(f"file name {name!r} must be a relative path inside the work dir")
    return norm


class SandboxRunner:
    """Runs code confined as described in `verl.sandbox.isolation`; thread-safe, one process per call."""

    def __init__(
        self,
        *,
        python: str | None = None,
        limits: Limits | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        probe: bool = True,
    ):
        host = check_host()
        self.unshare, self.user_namespace = host.unshare, host.user_namespace
        self.setpriv = shutil.which("setpriv")
        self._active: set[subprocess.Popen] = set()
        self._active_lock = threading.Lock()
        self._in_flight = 0
        self._idle = threading.Condition(self._active_lock)
        # Work dirs and cgroups carry the service's pid, so a later service can sweep what a killed one left.
        self._tag = f"{_PREFIX}{os.getpid()}-"
        self.uid, self.gid = nobody_ids(required=not self.user_namespace)
        self.python = python or sys.executable
        self.limits = limits or Limits()
        self.output_limit = output_limit
        self.cgroup_parent = PidsCgroup.available()
        if self.cgroup_parent is None and self.user_namespace:
            # each run's nobody lives in a user namespace of its own, where RLIMIT_NPROC counts that run only
            self.limits = replace(self.limits, nproc=min(self.limits.nproc, self.limits.pids))
            logger.warning(
                "sandbox: not root, so each run gets user namespaces of its own; no writable pids cgroup "
                "(/sys/fs/cgroup), so the process count is limited by RLIMIT_NPROC=%d, counted per run",
                self.limits.nproc,
            )
        elif self.cgroup_parent is None:
            logger.warning(
                "sandbox: no writable pids cgroup (/sys/fs/cgroup); process count is limited by RLIMIT_NPROC=%d "
                "for user nobody only",
                self.limits.nproc,
            )
        self._expose = interpreter_roots(self.python)
        self._counter = itertools.count()
        self.sweep_stale()
        if probe:
            self.probe()

    @property
    def cgroup_version(self) -> int | None:
        return None if self.cgroup_parent is None else self.cgroup_parent[1]

    def probe(self) -> None:
        """Run a tiny program and check it is really confined; IsolationError when not."""
        code = (
            "import os, socket\n"
            "s = socket.socket()\ns.settimeout(1)\n"
            "try:\n    s.connect(('127.0.0.1', 9)); net = 'reachable'\n"
            "except OSError as e:\n    net = 'refused' if e.errno == 111 else 'unreachable'\n"
            "print(os.getuid(), os.getpid(), net)\n"
        )
        result = self.run(code, run_timeout=20)
        expected = f"{self.uid} 2 unreachable"
        if result.status != "Finished" or result.return_code != 0 or result.stdout.strip() != expected:
            raise IsolationError(
                "the sandbox probe did not run confined (expected uid, pid and network "
                f"{expected!r}): status={result.status} rc={result.return_code} stdout={result.stdout!r} "
                f"stderr={result.stderr[-2000:]!r} {result.message}"
            )

    def run(
        self,
        code: str,
        *,
        language: str = "python",
        run_timeout: float = 10.0,
        memory_limit_mb: int | None = None,
        stdin: str | bytes | None = None,
        files: dict[str, bytes] | None = None,
        fetch_files: list[str] | None = None,
    ) -> Execution:
        if language not in LANGUAGES:
            raise SandboxInputError(f"language {language!r} is not supported here; use one of {sorted(LANGUAGES)}")
        main = LANGUAGES[language]
        files = {_check_name(n): c for n, c in (files or {}).items()}
        if main in files:
            raise SandboxInputError(f"files may not contain {main!r}: the code itself is written there")
        fetch = [_check_name(n) for n in (fetch_files or [])]
        limits = replace(self.limits, cpu_seconds=run_timeout)
        if memory_limit_mb:
            limits = replace(limits, memory_mb=int(memory_limit_mb))
        with self._active_lock:
            self._in_flight += 1
        workdir = tempfile.mkdtemp(prefix=self._tag)
        cgroup = PidsCgroup.create(self.cgroup_parent, f"{self._tag}{next(self._counter)}", limits)
        try:
            self._populate(workdir, main, code, files)
            execution = self._execute(workdir, main, language, limits, run_timeout, stdin, cgroup)
            execution.files, missing = self._fetch(workdir, fetch)
            if missing:
                execution.message = (execution.message + f" files not found: {missing}").strip()
            return execution
        finally:
            if cgroup is not None:
                cgroup.kill_and_remove()
            shutil.rmtree(workdir, ignore_errors=True)
            with self._active_lock:
                self._in_flight -= 1
                self._idle.notify_all()

    def close(self, timeout: float = 10.0) -> None:
        """Kill every run still in flight (the service is stopping) and wait for their clean-up."""
        with self._active_lock:
            running = list(self._active)
        for proc in running:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=timeout)

    def sweep_stale(self) -> None:
        """Remove the work dirs and cgroups of services that died without cleaning up (e.g. SIGKILL)."""
        places = [(tempfile.gettempdir(), False)]
        if self.cgroup_parent is not None:
            places.append((self.cgroup_parent[0], True))
        for base, is_cgroup in places:
            try:
                entries = os.listdir(base)
            except OSError:
                continue
            for entry in entries:
                owner = entry[len(_PREFIX) :].split("-", 1)[0]
                if not entry.startswith(_PREFIX) or not owner.isdigit() or _alive(int(owner)):
                    continue
                path = os.path.join(base, entry)
                if is_cgroup:
                    PidsCgroup(path, self.cgroup_parent[1]).kill_and_remove()
                else:
                    shutil.rmtree(path, ignore_errors=True)

    # ------------------------------------------------------------------------------------------------ steps
    def _populate(self, workdir: str, main: str, code: str, files: dict[str, bytes]) -> None:
        # In a user namespace the program is this service's own user on the host: the files are already its own.
        chown = (lambda path: None) if self.user_namespace else (lambda path: os.chown(path, self.uid, self.gid))
        chown(workdir)
        for name, content in {**files, main: code.encode()}.items():
            path = os.path.join(workdir, name)
            parent = os.path.dirname(path)
            os.makedirs(parent, exist_ok=True)
            with open(path, "wb") as f:
                f.write(content)
            for p in (path, parent):
                chown(p)

    def _argv(self, language: str, main: str) -> list[str]:
        if language == "python":
            return [self.python, main]
        return ["/bin/bash", main]

    def _env(self, workdir: str) -> dict[str, str]:
        return {
            "PATH": f"{os.path.dirname(self.python)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
        }

    def _execute(self, workdir, main, language, limits, run_timeout, stdin, cgroup) -> Execution:
        status_r, status_w = os.pipe()
        spec = Spec(
            workdir=workdir,
            argv=self._argv(language, main),
            env=self._env(workdir),
            uid=self.uid,
            gid=self.gid,
            limits=limits,
            status_fd=status_w,
            expose=self._expose,
            cgroup_procs=[cgroup.procs_file] if cgroup is not None else [],
            user_namespace=self.user_namespace,
        )
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                sandbox_argv(self.unshare, spec, self.setpriv),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(status_w,),
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(status_w)
        with self._active_lock:
            self._active.add(proc)
        try:
            out, truncated, timed_out = self._communicate(proc, data, start + run_timeout)
        finally:
            self._kill(proc, cgroup)
            with self._active_lock:
                self._active.discard(proc)
        elapsed = time.monotonic() - start
        with os.fdopen(status_r, "rb") as f:
            raw = f.read()
        report = json.loads(raw) if raw else {}
        return self._result(report, proc, out, truncated, timed_out, elapsed)

    def _communicate(self, proc, data: bytes, deadline: float):
        """Feed stdin, collect stdout/stderr up to the cap; stop at EOF, the deadline or an overflow."""
        buffers = {proc.stdout: bytearray(), proc.stderr: bytearray()}
        names = {proc.stdout: "stdout", proc.stderr: "stderr"}
        truncated: dict[str, bool] = {}
        if data:
            threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True).start()
        else:
            proc.stdin.close()
        with selectors.DefaultSelector() as sel:
            for stream in buffers:
                sel.register(stream, selectors.EVENT_READ)
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return _decode(buffers, names), truncated, True
                for key, _ in sel.select(timeout=min(remaining, 0.5)):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    buf = buffers[key.fileobj]
                    room = self.output_limit - len(buf)
                    buf += chunk[:room]
                    if len(chunk) > room:
                        truncated[names[key.fileobj]] = True
                        return _decode(buffers, names), truncated, False
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return _decode(buffers, names), truncated, True
        return _decode(buffers, names), truncated, False

    @staticmethod
    def _kill(proc: subprocess.Popen, cgroup: PidsCgroup | None) -> None:
        """Kill the namespace: its init (through the cgroup or the process group); its death takes all others."""
        if proc.poll() is None:
            if cgroup is not None:
                cgroup.kill_and_remove()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=_KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass

    def _result(self, report, proc, out, truncated, timed_out, elapsed) -> Execution:
        stdout, stderr = out
        if "setup_error" in report:
            return Execution(
                "Error", elapsed, None, stdout, stderr, message=f"sandbox setup failed: {report['setup_error']}"
            )
        notes = []
        if timed_out:
            status, rc = "TimeLimitExceeded", None
            notes.append("wall-clock time limit exceeded; the program was killed")
        elif truncated:
            status, rc = "Finished", -signal.SIGKILL
            which = " and ".join(sorted(truncated))
            notes.append(f"{which} exceeded {self.output_limit} bytes; the program was killed and its output truncated")
        elif "signal" in report:
            rc = -report["signal"]
            # SIGXCPU comes only from the soft RLIMIT_CPU: the program used up its CPU seconds.
            status = "TimeLimitExceeded" if report["signal"] == signal.SIGXCPU else "Finished"
            if status == "TimeLimitExceeded":
                notes.append("CPU time limit exceeded")
        elif "exit_code" in report:
            status, rc = "Finished", report["exit_code"]
        else:
            status, rc = "Error", proc.returncode
            notes.append(f"the sandbox ended without a status (unshare exit {proc.returncode})")
        if notes:
            stderr = (
                stderr
                + ("\n" if stderr and not stderr.endswith("\n") else "")
                + "".join(f"[sandbox] {n}\n" for n in notes)
            )
        return Execution(status, elapsed, rc, stdout, stderr, truncated=truncated, message="; ".join(notes))

    def _fetch(self, workdir: str, names: list[str]) -> tuple[dict[str, bytes], list[str]]:
        found, missing = {}, []
        root = os.path.realpath(workdir)
        for name in names:
            path = os.path.realpath(os.path.join(workdir, name))
            # The program may have left a symlink to a host file; never follow it out of the work dir.
            if not path.startswith(root + os.sep):
                missing.append(name)
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                missing.append(name)
                continue
            with os.fdopen(fd, "rb") as f:
                if not os.path.isfile(path):
                    missing.append(name)
                    continue
                found[name] = f.read(self.limits.file_size_mb << 20)
        return found, missing


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _feed(stream, data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except (BrokenPipeError, ValueError, OSError):
        pass


def _decode(buffers: dict, names: dict) -> tuple[str, str]:
    by_name = {names[s]: bytes(b).decode("utf-8", errors="replace") for s, b in buffers.items()}
    return by_name["stdout"], by_name["stderr"]
