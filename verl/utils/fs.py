"""Upstream verl's file-system helpers (`verl.utils.fs`): make a path local before reading it.

This package reads local paths and ``file://`` URLs only. Upstream also copies ``hdfs://`` paths through an HDFS
client; here such a path is recognised (``is_non_local``) and ``copy_to_local`` refuses it with a ValueError that
says to copy the data to a local folder first (no network client is bundled).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile

from filelock import FileLock

__all__ = [
    "copy",
    "copy_local_path_from_hdfs",
    "copy_to_local",
    "copy_to_shm",
    "exists",
    "get_local_temp_path",
    "is_non_local",
    "local_mkdir_safe",
    "makedirs",
    "md5_encode",
    "verify_copy",
]

_HDFS_PREFIX = "hdfs://"
_FILE_PREFIX = "file://"
SHM_CACHE_ROOT = "/dev/shm/verl-cache"


def is_non_local(path: str) -> bool:
    """True for an HDFS path (``hdfs://...``), as upstream; local paths and ``file://`` URLs are local."""
    return str(path).startswith(_HDFS_PREFIX)


def _local(path: str) -> str:
    """The file-system path behind a local path or a ``file://`` URL; any other URL is refused."""
    path = os.fspath(path)
    if path.startswith(_FILE_PREFIX):
        return path[len(_FILE_PREFIX):]
    if is_non_local(path) or "://" in path:
        raise ValueError(f"{path}: only local paths and file:// URLs are supported here (no HDFS or object-store "
                         "client is bundled); copy the data to a local folder and pass that path")
    return path


def exists(path: str, **kwargs) -> bool:
    """Whether a local path (or ``file://`` URL) exists."""
    return os.path.exists(_local(path))


def makedirs(name: str, mode: int = 0o777, exist_ok: bool = False, **kwargs) -> None:
    """``os.makedirs`` for a local path or ``file://`` URL."""
    os.makedirs(_local(name), mode=mode, exist_ok=exist_ok)


def copy(src: str, dst: str, **kwargs) -> str:
    """Copy a file or a whole folder (local paths or ``file://`` URLs); returns the destination."""
    source, target = _local(src), _local(dst)
    if os.path.isdir(source):
        return shutil.copytree(source, target, dirs_exist_ok=True)
    return shutil.copy2(source, target)


def md5_encode(path: str) -> str:
    """The hex MD5 of a path string: a short, stable folder or lock name for it."""
    return hashlib.md5(path.encode()).hexdigest()


def get_local_temp_path(hdfs_path: str, cache_dir: str) -> str:
    """``{cache_dir}/{md5(hdfs_path)}/{basename(hdfs_path)}``; the hashed folder is created."""
    folder = os.path.join(cache_dir, md5_encode(hdfs_path))
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, os.path.basename(hdfs_path))


def _relative_entries(root: str) -> dict[str, int | None]:
    """Every entry below `root` by relative path: a file's size, None for a folder."""
    entries: dict[str, int | None] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            entries[os.path.relpath(os.path.join(folder, name), root)] = None
        for name in files:
            full = os.path.join(folder, name)
            entries[os.path.relpath(full, root)] = os.path.getsize(full)
    return entries


def verify_copy(src: str, dest: str) -> bool:
    """True when `dest` has what `src` has: same kind, same file sizes, the same entries for a folder."""
    if not (os.path.exists(src) and os.path.exists(dest)):
        return False
    if os.path.isfile(src) or os.path.isfile(dest):
        return os.path.isfile(src) and os.path.isfile(dest) and os.path.getsize(src) == os.path.getsize(dest)
    return _relative_entries(src) == _relative_entries(dest)


def copy_to_shm(src: str) -> str:
    """A copy of `src` (file or folder) under /dev/shm/verl-cache/<md5 of its absolute path>/, made unless a
    complete copy is already there; returns the copy's path."""
    source = os.path.abspath(os.path.normpath(_local(src)))
    target = get_local_temp_path(source, SHM_CACHE_ROOT)
    if os.path.exists(target) and verify_copy(source, target):
        print(f"[WARNING]: {target} already holds a copy of {source}; it is reused. Remove it to copy again.")
        return target
    copy(source, target)
    return target


def copy_to_local(src: str, cache_dir: str | None = None, filelock: str = ".file.lock", verbose: bool = False,
                  always_recopy: bool = False, use_shm: bool = False) -> str:
    """A local path for `src`: a local path is returned as it is (a ``file://`` URL as its path), or its
    /dev/shm copy with ``use_shm=True``. An ``hdfs://`` path raises ValueError (no HDFS client here)."""
    local_path = copy_local_path_from_hdfs(src, cache_dir, filelock, verbose, always_recopy)
    return copy_to_shm(local_path) if use_shm else local_path


def copy_local_path_from_hdfs(src: str, cache_dir: str | None = None, filelock: str = ".file.lock",
                              verbose: bool = False, always_recopy: bool = False) -> str:
    """Upstream's older name for ``copy_to_local`` without ``use_shm``."""
    assert not str(src).endswith("/"), f"drop the trailing '/' from {src}: it would copy into the wrong folder"
    return _local(src)


def local_mkdir_safe(path: str) -> str:
    """Create a folder (relative paths are taken from the working directory) under a file lock, so that several
    processes creating it at once do not race; returns the absolute path."""
    path = os.path.abspath(path)
    lock_path = os.path.join(tempfile.gettempdir(), f"ckpt_{md5_encode(path)[:8]}.lock")
    try:
        with FileLock(lock_path, timeout=60):
            os.makedirs(path, exist_ok=True)
    except TimeoutError as err:
        print(f"Warning: could not take the lock {lock_path} for {path} ({err}); creating it without")
        os.makedirs(path, exist_ok=True)
    return path
