"""Durable, all-or-nothing file operations for checkpoints.

A checkpoint is only as good as its weakest write: a file the OS still holds in its page cache when the machine
dies is gone, and a rename that was not fsynced in its parent directory may be undone. Everything here writes to a
temporary name, fsyncs, then renames, so a reader sees either the old content or the complete new one.
"""

from __future__ import annotations

import io
import os
import shutil
import uuid
from collections.abc import Callable


def fsync_file(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_dir(path: str) -> None:
    """Make the entries of a directory (new files, renames) durable; a no-op where directories can't be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems (and all of Windows) refuse fsync on a directory; nothing more to do there
        pass
    finally:
        os.close(fd)


def fsync_tree(root: str) -> None:
    """fsync every file and directory under root, deepest first, so the whole tree survives a power cut."""
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            fsync_file(os.path.join(dirpath, name))
        fsync_dir(dirpath)


def atomic_write(path: str, write: Callable[[io.BufferedWriter], None]) -> None:
    """Write through `write(f)` into a sibling temp file, fsync it, then os.replace it over `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    fsync_dir(directory)


def atomic_write_text(path: str, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def atomic_torch_save(obj, path: str) -> None:
    import torch

    atomic_write(path, lambda f: torch.save(obj, f))


def publish_dir(tmp_dir: str, final_dir: str) -> None:
    """Rename a fully written `tmp_dir` to `final_dir` (same parent), replacing an existing `final_dir`.

    The old folder is first renamed aside to `<final>.old-<id>` and removed only after the new one is in place, so
    a crash in between leaves one complete copy on disk; `recover_or_remove_stale` puts it back on the next start.
    """
    parent = os.path.dirname(os.path.abspath(final_dir))
    old = None
    if os.path.exists(final_dir):
        old = f"{final_dir}.old-{uuid.uuid4().hex[:8]}"
        os.rename(final_dir, old)
    os.rename(tmp_dir, final_dir)
    fsync_dir(parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
