"""Checks shared by the sandbox tests."""

import time

import psutil

from verl.sandbox.client import run_code

NOBODY_UID = 65534


def nobody_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info.get("uids")
        if uids is not None and uids.real == NOBODY_UID:
            found.append(proc)
    return found


def assert_no_nobody_processes(within_s: float = 3.0) -> None:
    deadline = time.monotonic() + within_s
    while nobody_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = nobody_processes()
    assert not left, f"processes of user nobody left behind: {[(p.pid, p.name()) for p in left]}"


def assert_still_usable(url: str) -> None:
    result = run_code(url, "print(6 * 7)", run_timeout=10)
    assert result["status"] == "Success", result
    assert result["run_result"]["stdout"] == "42\n"
