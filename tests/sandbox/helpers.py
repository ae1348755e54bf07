"""Checks shared by the sandbox tests, and how to start the service as root or as an unprivileged user."""

import os
import shutil
import stat
import subprocess
import sys
import time

import psutil
import pytest

import verl
from verl.sandbox.client import run_code
from verl.sandbox.isolation import user_namespace_problem
from verl.sandbox.local import LocalSandbox

NOBODY_UID = 65534
# ROOT: the service runs as root and drops each program to nobody. UNPRIVILEGED: the service itself runs as an
# ordinary user (nobody when the tests are root, through setpriv) and builds its namespaces in a user namespace.
ROOT, UNPRIVILEGED = "root", "unprivileged"
MODES = (ROOT, UNPRIVILEGED)
_DROP = ["--reuid", str(NOBODY_UID), "--regid", str(NOBODY_UID), "--clear-groups", "--"]
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(verl.__file__)))


def program_uid(mode: str) -> int:
    """The host uid the sandboxed programs run as in this mode."""
    return NOBODY_UID if mode == ROOT or os.geteuid() == 0 else os.geteuid()


def unprivileged_prefix(python: str) -> list[str]:
    """argv before `python -m ...` that runs it as an unprivileged user with verl importable."""
    drop = [shutil.which("setpriv"), *_DROP] if os.geteuid() == 0 else []
    return [*drop, "/usr/bin/env", f"PYTHONPATH={_REPO}", python]


def unprivileged_python() -> str | None:
    """An interpreter the unprivileged user can run with verl importable (the venv's may live under /root, which
    nobody cannot enter: then the system's, as the service needs only the standard library)."""
    candidates = [os.path.realpath(sys.executable), shutil.which("python3") or "", "/usr/bin/python3"]
    for python in dict.fromkeys(c for c in candidates if c):
        # through a shell, so the interpreter's path is looked up with the user's own rights
        check = [*unprivileged_prefix("/bin/sh"), "-c", 'exec "$0" -c "import verl.sandbox.server"', python]
        if subprocess.run(check, capture_output=True, timeout=60, stdin=subprocess.DEVNULL).returncode == 0:
            return python
    return None


def skip_unless_possible(mode: str) -> None:
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("the sandbox needs util-linux unshare to build its namespaces")
    if mode == ROOT and os.geteuid() != 0:
        pytest.skip("the root mode needs the tests to run as root")
    if mode == UNPRIVILEGED:
        if os.geteuid() == 0 and shutil.which("setpriv") is None:
            pytest.skip("dropping to an unprivileged user needs util-linux setpriv")
        problem = user_namespace_problem(unshare)
        if problem is not None:
            pytest.skip(f"this kernel does not let unprivileged users create user namespaces: {problem}")


def make_sandbox(mode: str, **kwargs) -> LocalSandbox:
    """A LocalSandbox (not started) that runs the service in `mode`; skips the test where that is impossible."""
    skip_unless_possible(mode)
    sandbox = LocalSandbox(**kwargs)
    if mode == UNPRIVILEGED:
        python = unprivileged_python()
        if python is None:
            pytest.skip("no Python interpreter the unprivileged user can run with verl importable")
        sandbox.argv = [*unprivileged_prefix(python), *sandbox.argv[1:]]
    return sandbox


def world_readable_dir(path: str) -> str:
    os.makedirs(path, exist_ok=True)
    os.chmod(path, os.stat(path).st_mode | stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    return path


def nobody_processes(service_pid: int, uid: int = NOBODY_UID) -> list[psutil.Process]:
    """Processes of the programs' user under this service (other sandboxes on the machine are not ours to count).

    Nothing a program starts can leave this tree alive: in its PID namespace orphans are re-parented to the
    namespace's init, a descendant of the service, and when that init exits the kernel kills the rest.
    """
    found = []
    for proc in psutil.Process(service_pid).children(recursive=True):
        try:
            if proc.uids().real == uid:
                found.append(proc)
        except psutil.NoSuchProcess:
            pass
    return found


def assert_no_nobody_processes(service_pid: int, within_s: float = 30.0, uid: int = NOBODY_UID) -> None:
    deadline = time.monotonic() + within_s
    while nobody_processes(service_pid, uid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = nobody_processes(service_pid, uid)
    assert not left, f"processes of the programs' user left behind: {[(p.pid, p.name()) for p in left]}"


def assert_still_usable(url: str) -> None:
    result = run_code(url, "print(6 * 7)", run_timeout=10)
    assert result["status"] == "Success", result
    assert result["run_result"]["stdout"] == "42\n"
