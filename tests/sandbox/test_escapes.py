"""What a model's code might try, run through the real service: each attempt is contained and reported, and the
sandbox serves a normal program right after. Every test runs twice (tests/sandbox/conftest.py): with the service
as root, and as an unprivileged user building its namespaces in a user namespace. docs/sandbox.md tabulates what
each attempt got."""

import os
import socket
import time
import uuid
from urllib.parse import urlparse

from tests.sandbox.helpers import assert_no_nobody_processes, assert_still_usable
from verl.sandbox.client import run_code

PROBE_CONNECT = """
import errno, socket, sys
for port in map(int, sys.argv[1:] or [int(x) for x in open('ports.txt').read().split()]):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect(("127.0.0.1", port))
        print(port, "connected")
    except OSError as e:
        print(port, errno.errorcode.get(e.errno, e.errno))
"""


def test_socket_to_loopback_is_unreachable(sandbox_url):
    own_port = urlparse(sandbox_url).port
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        test_port = listener.getsockname()[1]
        result = run_code(sandbox_url, PROBE_CONNECT, files={"ports.txt": f"{own_port} {test_port}".encode()})
        assert result["status"] == "Success", result
        assert result["run_result"]["stdout"] == f"{own_port} ENETUNREACH\n{test_port} ENETUNREACH\n"
        try:
            conn, _ = listener.accept()
            conn.close()
            raise AssertionError("the sandboxed program reached a listening socket on the host")
        except TimeoutError:
            pass
    assert_still_usable(sandbox_url)


def test_writes_outside_the_work_dir_do_not_reach_the_host(sandbox_url):
    name = f"verl-escape-{uuid.uuid4().hex}"
    targets = [f"/tmp/{name}", f"/var/tmp/{name}", f"/root/{name}", f"/work/{name}", f"/dev/shm/{name}", f"~/{name}"]
    code = (
        "import os\n"
        f"for path in {targets!r}:\n"
        "    try:\n"
        "        with open(os.path.expanduser(path), 'w') as f:\n"
        "            f.write('escaped')\n"
        "        print(path, 'written')\n"
        "    except OSError as e:\n"
        "        print(path, type(e).__name__, e.strerror)\n"
        "print('workdir', os.getcwd())\n"
    )
    result = run_code(sandbox_url, code)
    lines = dict(line.split(" ", 1) for line in result["run_result"]["stdout"].splitlines())
    assert lines[f"/tmp/{name}"] == "OSError Read-only file system"
    assert lines[f"/var/tmp/{name}"] == "OSError Read-only file system"
    assert lines[f"/root/{name}"] == "OSError Read-only file system"
    assert lines[f"/work/{name}"] == "OSError Read-only file system"
    # The scratch /dev/shm and ~ (the work dir) are writable inside, private to the run and gone afterwards.
    assert lines[f"/dev/shm/{name}"] == "written"
    assert lines[f"~/{name}"] == "written"
    for host_path in [f"/tmp/{name}", f"/var/tmp/{name}", f"/root/{name}", f"/work/{name}", f"/dev/shm/{name}"]:
        assert not os.path.exists(host_path), host_path
    workdir = lines["workdir"]
    assert workdir.startswith("/tmp/verl-sandbox-") and not os.path.exists(workdir), "the work dir was left behind"
    assert_still_usable(sandbox_url)


def test_python_fork_bomb_is_capped_and_cleaned_up(sandbox_url, service_pid, programs_uid):
    code = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result = run_code(sandbox_url, code, run_timeout=3)
    # ended by the sandbox's own limit (not by the client's HTTP timeout), whatever the box's load
    assert result["status"] == "Failed"
    assert result["run_result"]["status"] == "TimeLimitExceeded"
    assert_no_nobody_processes(service_pid, uid=programs_uid)
    assert_still_usable(sandbox_url)


def test_bash_fork_bomb_is_capped_and_cleaned_up(sandbox_url, service_pid, programs_uid):
    result = run_code(sandbox_url, ":(){ :|:& };:\nsleep 1", language="bash", run_timeout=3)
    # The bomb runs in the background while the top-level shell sleeps; its forks hit the pids limit, and
    # everything still running dies when the shell exits (or is killed at the time limit).
    assert "Resource temporarily unavailable" in result["run_result"]["stderr"]
    assert result["status"] in ("Success", "Failed")
    assert_no_nobody_processes(service_pid, uid=programs_uid)
    assert_still_usable(sandbox_url)


def test_process_count_is_limited_and_children_die_with_the_program(sandbox_url, service_pid, programs_uid):
    code = (
        "import os, time\n"
        "started = 0\n"
        "for _ in range(500):\n"
        "    try:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(600)\n"
        "            os._exit(0)\n"
        "        started += 1\n"
        "    except OSError:\n"
        "        break\n"
        "print(started)\n"
    )
    result = run_code(sandbox_url, code, run_timeout=10)
    assert result["status"] == "Success", result
    started = int(result["run_result"]["stdout"])
    assert 0 < started < 100  # pids.max is 64 per run (the init and the program count too)
    assert_no_nobody_processes(service_pid, uid=programs_uid)  # the sleeping children died when the program exited
    assert_still_usable(sandbox_url)


def test_memory_bomb_fails_with_memory_error(sandbox_url):
    result = run_code(sandbox_url, "x = bytearray(4 << 30)\nprint('allocated')", memory_limit_mb=512)
    assert result["status"] == "Failed"
    assert result["run_result"]["stdout"] == ""
    assert "MemoryError" in result["run_result"]["stderr"]
    assert_still_usable(sandbox_url)


def test_gradual_memory_growth_is_stopped_at_the_limit(sandbox_url):
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(64 << 20))\n"
    result = run_code(sandbox_url, code, memory_limit_mb=512, run_timeout=10)
    assert result["status"] == "Failed"
    assert result["run_result"]["status"] == "Finished"
    assert "MemoryError" in result["run_result"]["stderr"]
    assert_still_usable(sandbox_url)


def test_infinite_loop_hits_the_time_limit(sandbox_url, service_pid, programs_uid):
    start = time.monotonic()
    result = run_code(sandbox_url, "while True:\n    pass", run_timeout=2)
    elapsed = time.monotonic() - start
    assert result["status"] == "Failed"
    assert result["run_result"]["status"] == "TimeLimitExceeded"
    assert result["run_result"]["return_code"] is None
    assert elapsed >= 1.9  # not before its limit (a loaded box can only make it later)
    assert "time limit" in result["message"]
    assert_no_nobody_processes(service_pid, uid=programs_uid)
    assert_still_usable(sandbox_url)


def test_100mb_print_is_truncated_and_reported(sandbox_url, service_pid, programs_uid):
    result = run_code(sandbox_url, "import sys\nsys.stdout.write('x' * (100 << 20))", run_timeout=30)
    assert result["status"] == "Failed"
    assert result["run_result"]["status"] != "TimeLimitExceeded"  # stopped for its output, not its 30 s limit
    assert len(result["run_result"]["stdout"]) == 1 << 20
    assert "stdout exceeded 1048576 bytes" in result["message"]
    assert "[sandbox] stdout exceeded" in result["run_result"]["stderr"]
    assert_no_nobody_processes(service_pid, uid=programs_uid)
    assert_still_usable(sandbox_url)


def test_sees_only_its_own_processes_as_nobody(sandbox_url):
    code = "import os\nprint(os.getuid(), os.getgid(), os.getpid(), sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"
    result = run_code(sandbox_url, code)
    assert result["run_result"]["stdout"] == "65534 65534 2 [1, 2]\n"


UNDO_MOUNTS = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)

def attempt(what, rc):
    print(what, "ok" if rc == 0 else os.strerror(ctypes.get_errno()))

def undo(where):
    attempt(where + " umount /tmp", libc.umount2(b"/tmp", 2))  # MNT_DETACH: would uncover the host's /tmp
    attempt(where + " remount / rw", libc.mount(None, b"/", None, 32 | 4096, None))  # MS_REMOUNT | MS_BIND

undo("as is:")
uid, gid = os.getuid(), os.getgid()
# a user namespace of its own, where it is root, with a mount namespace of its own (CLONE_NEWUSER | CLONE_NEWNS)
attempt("own namespaces:", libc.unshare(0x10000000 | 0x00020000))
for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
    with open(f"/proc/self/{name}", "w") as f:
        f.write(text)
undo("inside them:")
for path in sys.argv[1:] or open("targets.txt").read().split():
    try:
        open(path, "w").close()
        print(path, "written")
    except OSError as e:
        print(path, e.strerror)
"""


def test_the_mounts_cannot_be_undone_even_from_a_user_namespace_of_its_own(sandbox_url):
    name = f"verl-escape-{uuid.uuid4().hex}"
    targets = [f"/tmp/{name}", f"/work/{name}"]
    result = run_code(sandbox_url, UNDO_MOUNTS, files={"targets.txt": " ".join(targets).encode()})
    assert result["status"] == "Success", result
    lines = result["run_result"]["stdout"].splitlines()
    assert lines[0] == "as is: umount /tmp Operation not permitted"
    assert lines[1] == "as is: remount / rw Operation not permitted"
    if lines[2] == "own namespaces: ok":  # where the kernel lets nobody create user namespaces at all
        # the mounts it was given are locked together: nothing hidden can be uncovered, nothing made writable
        assert lines[3].startswith("inside them: umount /tmp ") and not lines[3].endswith(" ok")
        assert lines[4] == "inside them: remount / rw Operation not permitted"
    assert lines[-2:] == [f"{path} Read-only file system" for path in targets]
    for path in targets:
        assert not os.path.exists(path), path
    assert_still_usable(sandbox_url)
