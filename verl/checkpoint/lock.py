"""One writer per checkpoint folder: `<default_local_dir>/run.lock`.

The lock is an fcntl `flock` on that file, held by the driver for the whole run; the kernel drops it when the process
exits, however it exits (kill -9 included), so a crashed run never leaves a lock behind on a local filesystem. The
file's content (pid, host, user, start time) is only for the message a second run gets; it is emptied on a clean
release and the file itself stays (removing a lock file races with a run that is opening it).

Where the filesystem refuses flock (some Lustre/NFS mounts answer ENOLCK/ENOSYS/EOPNOTSUPP), the content alone decides:
a holder that is alive, or on another host (which cannot be checked from here), keeps the folder; a holder whose pid
is dead on this host is stale and taken over with a warning. A lock file naming a holder that never released it is
taken over with a warning when flock itself was free (that holder is gone). See docs/reliability.md for shared
filesystems.
"""

from __future__ import annotations

import errno
import fcntl
import getpass
import json
import logging
import os
import socket
import time
from typing import Any

logger = logging.getLogger(__name__)

LOCK_NAME = "run.lock"
_UNSUPPORTED = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}
_HELD = {errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK}


class CheckpointDirLocked(RuntimeError):
    """Another live run writes to this checkpoint folder (the message names its pid and host)."""


def this_holder() -> dict[str, Any]:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers): the uid is still meaningful
        user = "?"
    return {"pid": os.getpid(), "host": socket.gethostname(), "user": user, "uid": os.getuid(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S %z")}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def describe(holder: dict[str, Any]) -> str:
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} (user {holder.get('user', '?')}, "
            f"since {holder.get('since', '?')})")


class CheckpointDirLock:
    """Exclusive ownership of one checkpoint folder by this process; `acquire()` raises CheckpointDirLocked."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        self.path = os.path.join(self.root, LOCK_NAME)
        self._fd: int | None = None
        self.fcntl_supported: bool | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _read_holder(self, fd: int) -> dict[str, Any] | None:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 4096).decode("utf-8", errors="replace").strip()
        if not text:
            return None
        try:
            holder = json.loads(text)
        except ValueError:
            return {"pid": "?", "host": "?", "raw": text[:200]}
        return holder if isinstance(holder, dict) else {"raw": text[:200]}

    def _refuse(self, holder: dict[str, Any] | None, why: str) -> CheckpointDirLocked:
        who = describe(holder) if holder else "a process that has not written its name yet"
        return CheckpointDirLocked(
            f"checkpoint folder {self.root} is in use by another run: {who}{why}. Two runs writing one folder would "
            "delete each other's saves. Wait for that run to finish or stop it, or give this run its own folder "
            f"(trainer.experiment_name=<new name>, or trainer.default_local_dir=<another folder>). Lock file: {self.path}")

    def acquire(self) -> CheckpointDirLock:
        os.makedirs(self.root, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._lock_fd(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        return self

    def _lock_fd(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.fcntl_supported = True
        except OSError as err:
            if err.errno in _HELD:
                raise self._refuse(self._read_holder(fd), "") from None
            if err.errno not in _UNSUPPORTED:
                raise
            self.fcntl_supported = False
            logger.warning("%s: this filesystem does not support flock (%s); the lock relies on its pid/host "
                           "content only (see docs/reliability.md, shared filesystems)", self.path, err.strerror)
        me = this_holder()
        previous = self._read_holder(fd)
        if previous and (previous.get("pid"), previous.get("host")) != (me["pid"], me["host"]):
            self._judge_previous(previous, me)
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, json.dumps(me).encode("utf-8"))
        os.fsync(fd)

    def _judge_previous(self, previous: dict[str, Any], me: dict[str, Any]) -> None:
        """The file names a holder that did not release it: take over when it is provably gone, else refuse."""
        same_host = previous.get("host") == me["host"]
        pid = previous.get("pid")
        alive = same_host and isinstance(pid, int) and _pid_alive(pid)
        if not self.fcntl_supported:
            if not same_host:
                raise self._refuse(previous, f"; this filesystem has no flock, so whether that run is alive on "
                                             f"{previous.get('host')} cannot be checked from {me['host']}. If it is "
                                             f"not, delete {self.path}")
            if alive:
                raise self._refuse(previous, "")
        # flock was free (that holder is gone, a reused pid is not it), or no flock and the pid is dead here
        logger.warning("taking over the stale lock of %s on checkpoint folder %s (that run did not release it: "
                       "it was killed or its host died)", describe(previous), self.root)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # an empty file is a free lock, also for filesystems without flock
            if self.fcntl_supported:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> CheckpointDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def probe_checkpoint_dir(root: str) -> None:
    """Raise CheckpointDirLocked when another process holds `root`'s lock now; writes nothing (not even the lock
    file). Lets a start refuse in its first seconds; `acquire` later is what actually claims the folder."""
    lock = CheckpointDirLock(root)
    if lock.root in _held or not os.path.isfile(lock.path):
        return
    try:
        fd = os.open(lock.path, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in _HELD:
            raise lock._refuse(lock._read_holder(fd), "") from None
        return  # no flock here: acquire() judges by the file's content
    finally:
        os.close(fd)  # closing drops a lock this probe took


_held: dict[str, CheckpointDirLock] = {}


def hold_checkpoint_dir(root: str) -> CheckpointDirLock:
    """This process's lock on `root`, taken on first use and kept until `release_checkpoint_dir` or exit (a trainer
    built twice in one process, e.g. a notebook or a test resuming in-process, is still one writer)."""
    key = os.path.abspath(os.path.expanduser(root))
    lock = _held.get(key)
    if lock is None or not lock.held:
        lock = CheckpointDirLock(key).acquire()
        _held[key] = lock
    return lock


def release_checkpoint_dir(root: str) -> None:
    lock = _held.pop(os.path.abspath(os.path.expanduser(root)), None)
    if lock is not None:
        lock.release()
