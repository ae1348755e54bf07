"""Checks shared by the sandbox tests."""

import time

import psutil

from verl.sandbox.client import run_code

NOBODY_UID = 65534


def nobody_processes(service_pid: int) -> list[psutil.Process]:
    """Processes of user nobody under this service (other sandboxes on the machine are not ours to count).

    Nothing a program starts can leave this tree alive: in its PID namespace orphans are re-parented to the
    namespace's init, a descendant of the service, and when that init exits the kernel kills the rest.
    """
    found = []
    for proc in psutil.Process(service_pid).children(recursive=True):
        try:
            if proc.uids().real == NOBODY_UID:
                found.append(proc)
        except psutil.NoSuchProcess:
            pass
    return found


def assert_no_nobody_processes(service_pid: int, within_s: float = 3.0) -> None:
    deadline = time.monotonic() + within_s
    while nobody_processes(service_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = nobody_processes(service_pid)
    assert not left, f"processes of user nobody left behind: {[(p.pid, p.name()) for p in left]}"


def assert_still_usable(url: str) -> None:
    result = run_code(url, "print(6 * 7)", run_timeout=10)
    assert result["status"] == "Success", result
    assert result["run_result"]["stdout"] == "42\n"
