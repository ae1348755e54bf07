"""How one execution is confined: namespaces, an unprivileged user, rlimits, a pids cgroup, a private filesystem view.

The host side (`Limits`, `sandbox_argv`, `PidsCgroup`, `check_host`) runs in the service. The inside runs as a
script: `unshare --net --mount --pid --fork --kill-child --mount-proc -- python -I -S isolation.py SPEC` starts
this file as PID 1 of fresh namespaces, still root, so it can rearrange mounts and join a cgroup. It then forks
the program, which drops to `nobody` before exec, waits for it and reports its exit status on a pipe.

Without root (`check_host` says which mode), `unshare` also gets `--user --map-root-user`: a new user namespace in
which the service's user is root, enough to own the other namespaces and arrange their mounts. The program then
cannot become another host user, so it enters a second, nested user namespace in which it is `nobody` (mapped to
the service's user), holding no capability over the namespaces PID 1 set up: it can neither undo the mounts nor
reach the network, exactly as in the root mode. RLIMIT_NPROC, counted per user namespace (Linux >= 5.14), then
caps the run's processes when no cgroup is writable.

Why the `unshare` binary rather than `os.unshare` in a preexec function: CLONE_NEWPID only moves the *children*
of the caller into the new namespace, so a preexec function would need its own fork, and preexec functions are
unsafe in the threaded HTTP server. `unshare --fork --kill-child` does that fork in a separate process.

Why a PID 1 of our own instead of exec'ing the program as PID 1: the kernel ignores default-action signals sent
to a namespace's init (SIGXCPU from RLIMIT_CPU included), and when init exits every other process of the
namespace is killed. So the program runs as PID 2 with ordinary signal semantics, and whatever it left behind
(background children, a fork bomb) dies the moment it exits.

This file imports only the standard library: the inside runs with `-I -S` before any site-packages are read.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
from dataclasses import asdict, dataclass, field

NOBODY = "nobody"

# Inside the namespaces these stay visible but become empty (private tmpfs): the world-writable scratch places,
# and root's and users' homes (credentials, caches). The work dir and the interpreter are bound back in.
HIDDEN_DIRS = ("/tmp", "/var/tmp", "/root", "/home", "/run", "/dev/shm", "/dev/mqueue")
# Where the program may write besides its work dir: a private, size-capped, discarded scratch area, because
# multiprocessing's semaphores need one.
SCRATCH_DIRS = ("/dev/shm",)
# unshare's flags: the namespaces of every run, and (without root) the user namespace that owns them
_NS_FLAGS = ("--net", "--mount", "--pid", "--fork", "--mount-proc")
_USER_NS_FLAGS = ("--user", "--map-root-user")


class IsolationError(RuntimeError):
    """The sandbox cannot be set up on this machine; the message says what is missing."""


@dataclass(frozen=True)
class Host:
    """How this machine lets the sandbox build its namespaces: as root, or through a user namespace."""

    unshare: str
    user_namespace: bool  # False: the service is root; True: it is not, and maps itself to root in a user namespace


@dataclass
class Limits:
    """Per-execution limits. Sizes in MiB; `pids` caps the process count through the cgroup (or RLIMIT_NPROC)."""

    cpu_seconds: float = 10.0
    memory_mb: int = 1024
    file_size_mb: int = 64
    open_files: int = 256
    nproc: int = 256
    pids: int = 64
    tmpfs_mb: int = 64


@dataclass
class Spec:
    """What the inside needs to know; passed as one JSON argument."""

    workdir: str
    argv: list[str]
    env: dict[str, str]
    uid: int
    gid: int
    limits: Limits
    status_fd: int
    expose: list[str] = field(default_factory=list)
    cgroup_procs: list[str] = field(default_factory=list)
    user_namespace: bool = False  # see Host: the program becomes nobody in a nested user namespace, not by setuid


def nobody_ids(required: bool = True) -> tuple[int, int]:
    """The uid and gid of `nobody`; without `required`, 65534 (the kernel's overflow id) where it is missing."""
    import pwd

    try:
        entry = pwd.getpwnam(NOBODY)
    except KeyError as err:
        if not required:
            return 65534, 65534
        raise IsolationError(f"the sandbox runs code as user {NOBODY!r}, which does not exist here") from err
    return entry.pw_uid, entry.pw_gid


def check_host() -> Host:
    """How the namespaces can be built here, or an IsolationError naming what is missing."""
    import shutil

    unshare = shutil.which("unshare")
    if unshare is None:
        raise IsolationError("`unshare` (util-linux) is not installed; the sandbox needs it for its namespaces")
    if os.geteuid() == 0:
        nobody_ids()
        return Host(unshare, user_namespace=False)
    problem = user_namespace_problem(unshare)
    if problem is not None:
        raise IsolationError(
            f"the sandbox needs either root or unprivileged user namespaces, and has neither here: it runs as uid "
            f"{os.geteuid()} (not root), and creating a user namespace failed ({problem}). Run the service as "
            "root, or allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0, and where they "
            "exist kernel.unprivileged_userns_clone=1 and kernel.apparmor_restrict_unprivileged_userns=0)"
        )
    return Host(unshare, user_namespace=True)


def user_namespace_problem(unshare: str) -> str | None:
    """None when this user can create the namespaces a run needs inside a user namespace, else why not."""
    import subprocess

    argv = [unshare, *_USER_NS_FLAGS, *_NS_FLAGS, "--", "true"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{' '.join(argv)}: {err}"
    if done.returncode != 0:
        return f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}"
    return None


def interpreter_roots(python: str) -> list[str]:
    """Directories a hidden-dir interpreter needs to be bound back in (e.g. a pyenv Python under /root)."""
    real = os.path.realpath(python)
    prefix = os.path.dirname(os.path.dirname(real))
    roots = [prefix]
    if os.path.realpath(sys.executable) == real:
        roots += [os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)]
    return sorted({r for r in roots if any(_under(r, h) for h in HIDDEN_DIRS)})


def sandbox_argv(unshare: str, spec: Spec, setpriv: str | None = None) -> list[str]:
    inside_python = os.path.realpath(sys.executable)
    # If the service itself dies (even by SIGKILL), setpriv's parent-death signal takes unshare down, and
    # --kill-child takes the namespace's init, hence the whole namespace, with it.
    guard = [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []
    return [
        *guard,
        unshare,
        *(_USER_NS_FLAGS if spec.user_namespace else ()),
        *_NS_FLAGS,
        "--kill-child",
        "--",
        inside_python,
        "-I",
        "-S",
        os.path.abspath(__file__),
        json.dumps(asdict(spec)),
    ]


class PidsCgroup:
    """A per-run child cgroup with pids.max (and memory.max on cgroup v2); `None` from `create` when unavailable."""

    _V2_ROOT = "/sys/fs/cgroup"
    _V1_PIDS = "/sys/fs/cgroup/pids"

    def __init__(self, path: str, version: int):
        self.path = path
        self.version = version

    @classmethod
    def available(cls) -> tuple[str, int] | None:
        """The parent directory and cgroup version to create run cgroups in, if writable."""
        v2_controllers = os.path.join(cls._V2_ROOT, "cgroup.controllers")
        if os.path.exists(v2_controllers):
            with open(v2_controllers) as f:
                if "pids" in f.read().split() and os.access(cls._V2_ROOT, os.W_OK):
                    return cls._V2_ROOT, 2
        if os.path.isdir(cls._V1_PIDS) and os.access(cls._V1_PIDS, os.W_OK):
            return cls._V1_PIDS, 1
        return None

    @classmethod
    def create(cls, parent: tuple[str, int] | None, name: str, limits: Limits) -> PidsCgroup | None:
        if parent is None:
            return None
        base, version = parent
        path = os.path.join(base, name)
        try:
            os.mkdir(path)
            _write(os.path.join(path, "pids.max"), str(limits.pids))
            if version == 2 and os.path.exists(os.path.join(path, "memory.max")):
                _write(os.path.join(path, "memory.max"), str(limits.memory_mb * 2**20))
        except OSError:
            _rmdir_quietly(path)
            return None
        return cls(path, version)

    @property
    def procs_file(self) -> str:
        return os.path.join(self.path, "cgroup.procs")

    def peak_pids(self) -> int | None:
        try:
            with open(os.path.join(self.path, "pids.peak")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def kill_and_remove(self) -> None:
        import time

        kill_file = os.path.join(self.path, "cgroup.kill")
        for _ in range(200):
            if os.path.exists(kill_file):
                _write(kill_file, "1", missing_ok=True)
            try:
                with open(self.procs_file) as f:
                    pids = [int(p) for p in f.read().split()]
            except OSError:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.01)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _write(path: str, text: str, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except FileNotFoundError:
        if not missing_ok:
            raise


def _rmdir_quietly(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:
        pass


# ----------------------------------------------------------------------------------------- inside the namespaces
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC = 32, 4096, 16384
_MS_NOSYMFOLLOW, _MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME, _MS_STRICTATIME = 256, 1024, 2048, 1 << 21, 1 << 24
_PR_SET_PDEATHSIG, _PR_SET_NO_NEW_PRIVS = 1, 38
_CLONE_NEWUSER = 0x10000000
# A remount must repeat a mount's atime mode too: inside a user namespace the inherited mounts' flags are locked,
# and a remount that would change one (even to the relatime default) fails with EPERM.
_MOUNT_OPTION_FLAGS = {
    "ro": _MS_RDONLY,
    "nosuid": _MS_NOSUID,
    "nodev": _MS_NODEV,
    "noexec": _MS_NOEXEC,
    "nosymfollow": _MS_NOSYMFOLLOW,
    "noatime": _MS_NOATIME,
    "nodiratime": _MS_NODIRATIME,
    "relatime": _MS_RELATIME,
    "strictatime": _MS_STRICTATIME,
}


class _Libc:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL(None, use_errno=True)

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
        enc = [None if s is None else s.encode() for s in (source, target, fstype, data)]
        if self.lib.mount(enc[0], enc[1], enc[2], ctypes.c_ulong(flags), enc[3]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {source} on {target} ({fstype}): {os.strerror(err)}")

    def prctl(self, option: int, arg: int) -> None:
        if self.lib.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl({option}): {os.strerror(err)}")

    def unshare(self, flags: int) -> None:
        if self.lib.unshare(ctypes.c_int(flags)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"unshare({flags:#x}): {os.strerror(err)}")


def _mount_points() -> list[tuple[str, int]]:
    """(mount point, per-mount flags) of every mount in this namespace, parents before children."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            flags = 0
            for opt in fields[5].split(","):
                flags |= _MOUNT_OPTION_FLAGS.get(opt, 0)
            points.append((point, flags))
    return points


def _make_everything_read_only(libc: _Libc) -> None:
    # Bind-remounts change only this namespace's copy of each mount, not the host's.
    for point, flags in _mount_points():
        if point.startswith("/proc"):
            continue
        try:
            libc.mount(None, point, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | flags, None)
        except OSError:
            if point == "/":
                raise


def _flags_at(path: str) -> int:
    """The per-mount flags of the mount `path` is on (the last mounted, longest matching mount point)."""
    best, flags = "", 0
    for point, point_flags in _mount_points():
        if _under(path, point) and len(point) >= len(best):
            best, flags = point, point_flags
    return flags


def _bind_back(libc: _Libc, fd: int, path: str, writable: bool) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)
    libc.mount(f"/proc/self/fd/{fd}", path, None, _MS_BIND | _MS_REC, None)
    # A bind inherits its source mount's flags, and every source was made read-only above: set them explicitly,
    # keeping the ones a user namespace locks (noexec, atime) and dropping only the read-only flag we added.
    kept = _flags_at(path) & ~(_MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    flags = _MS_REMOUNT | _MS_BIND | _MS_NOSUID | _MS_NODEV | kept | (0 if writable else _MS_RDONLY)
    libc.mount(None, path, None, flags, None)


def _arrange_filesystem(libc: _Libc, spec: Spec) -> None:
    # Open what must stay reachable before the tmpfs mounts hide it; /proc/self/fd/N still names it afterwards.
    keep = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in [spec.workdir, *spec.expose]}
    _make_everything_read_only(libc)
    size = f"size={spec.limits.tmpfs_mb}m"
    for hidden in HIDDEN_DIRS:
        if not os.path.isdir(hidden):
            continue
        mode = "1777" if hidden in SCRATCH_DIRS else "755"
        libc.mount("tmpfs", hidden, "tmpfs", _MS_NOSUID | _MS_NODEV, f"{size},mode={mode}")
    for path in spec.expose:
        _bind_back(libc, keep[path], path, writable=False)
    _bind_back(libc, keep[spec.workdir], spec.workdir, writable=True)
    for hidden in HIDDEN_DIRS:
        # Read-only again now that the bind targets exist: only the work dir and the scratch dirs stay writable.
        if os.path.isdir(hidden) and hidden not in SCRATCH_DIRS:
            libc.mount(None, hidden, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV, f"{size},mode=755")
    for fd in keep.values():
        os.close(fd)


def _set_rlimits(limits: Limits) -> None:
    cpu = max(1, int(limits.cpu_seconds + 0.999))
    mib = 2**20
    for kind, value in (
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (limits.memory_mb * mib,) * 2),
        (resource.RLIMIT_FSIZE, (limits.file_size_mb * mib,) * 2),
        (resource.RLIMIT_NOFILE, (limits.open_files,) * 2),
        (resource.RLIMIT_NPROC, (limits.nproc,) * 2),
        (resource.RLIMIT_CORE, (0, 0)),
    ):
        resource.setrlimit(kind, value)


def _become_nobody_in_user_namespace(libc: _Libc, uid: int, gid: int) -> None:
    """Enter a new user namespace in which this process (root of the outer one) is `uid`/`gid`. It keeps no
    capability over the outer namespace, which owns the mounts and the network, and exec drops the ones it holds in
    the new namespace (its uid there is not 0). The one-line maps need no privilege; groups cannot be changed."""
    libc.unshare(_CLONE_NEWUSER)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} 0 1")
    _write("/proc/self/gid_map", f"{gid} 0 1")
    os.setgid(gid)
    os.setuid(uid)


def _exec_program(libc: _Libc, spec: Spec) -> None:
    """In the forked child: become nobody with the limits, then exec. Never returns."""
    try:
        os.setsid()
        _set_rlimits(spec.limits)
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1)  # setuid binaries (su, sudo, ping) cannot hand root back
        if spec.user_namespace:
            _become_nobody_in_user_namespace(libc, spec.uid, spec.gid)
        else:
            os.setgroups([])
            os.setgid(spec.gid)
            os.setuid(spec.uid)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # cleared by setuid; re-armed against PID 1 dying
        os.chdir(spec.workdir)
        os.execve(spec.argv[0], spec.argv, spec.env)
    except BaseException as err:  # noqa: BLE001 - anything here must become a report, not a Python traceback
        os.write(2, f"sandbox: cannot start the program: {err}\n".encode())
    os._exit(127)


def _report(fd: int, payload: dict) -> None:
    os.write(fd, json.dumps(payload).encode())
    os.close(fd)


def inside_main(raw_spec: str) -> None:
    data = json.loads(raw_spec)
    data["limits"] = Limits(**data["limits"])
    spec = Spec(**data)
    os.set_inheritable(spec.status_fd, False)
    libc = _Libc()
    try:
        for procs in spec.cgroup_procs:
            _write(procs, "0")  # "0" is the writer itself, whatever its number in this PID namespace
        _arrange_filesystem(libc, spec)
    except OSError as err:
        _report(spec.status_fd, {"setup_error": str(err)})
        os._exit(126)
    child = os.fork()
    if child == 0:
        _exec_program(libc, spec)
    while True:  # as init we also reap whatever the program orphaned
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            break
    if os.WIFSIGNALED(status):
        _report(spec.status_fd, {"signal": os.WTERMSIG(status)})
    else:
        _report(spec.status_fd, {"exit_code": os.WEXITSTATUS(status)})
    os._exit(0)  # everything else in the namespace dies with us


if __name__ == "__main__":
    inside_main(sys.argv[1])
