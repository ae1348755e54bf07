"""A per-role manifest (`manifest.json`): every file of the checkpoint with its size and sha256.

Written last by rank 0 once every rank's files are on disk, so its presence marks the role's folder complete.
Loading checks each file it is about to read against it, so a missing, truncated or bit-flipped shard stops the
run with that file's name instead of a pickle error deep inside torch.distributed.checkpoint.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import logging
import os
import socket
from collections.abc import Iterable
from typing import Any

from verl.checkpoint.atomic import atomic_write_text

logger = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
FORMAT_VERSION = 1
_CHUNK = 8 << 20


class CheckpointIntegrityError(RuntimeError):
    """A checkpoint file is missing, truncated or corrupted (the message names it)."""


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def list_files(root: str) -> list[str]:
    """Relative paths of every regular file under root but the manifest, sorted (the same list on every rank)."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        found += [os.path.relpath(os.path.join(dirpath, name), root) for name in files]
    return sorted(p for p in found if p != MANIFEST_NAME)


def describe_files(root: str, rel_paths: Iterable[str]) -> dict[str, dict[str, Any]]:
    return {rel: {"size": os.path.getsize(os.path.join(root, rel)), "sha256": sha256_of(os.path.join(root, rel))}
            for rel in rel_paths}


def writer() -> dict[str, Any]:
    """Who writes a checkpoint: recorded in its manifest so that loading one from elsewhere can say so."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        user = "?"
    return {"uid": os.getuid(), "user": user, "host": socket.gethostname()}


def write_manifest(root: str, files: dict[str, dict[str, Any]], info: dict[str, Any]) -> str:
    path = os.path.join(root, MANIFEST_NAME)
    body = {"format_version": FORMAT_VERSION, **info, "written_by": writer(), "files": dict(sorted(files.items()))}
    atomic_write_text(path, json.dumps(body, indent=1))
    return path


def read_manifest(root: str) -> dict[str, Any]:
    path = os.path.join(root, MANIFEST_NAME)
    if not os.path.isfile(path):
        raise CheckpointIntegrityError(
            f"{path} is missing: {root} is not a complete checkpoint (a save was interrupted, or the folder was not "
            "written by verl). Resume from another global_step_N folder.")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as err:
        raise CheckpointIntegrityError(f"{path} is unreadable ({err}); the checkpoint in {root} cannot be trusted") from err
    if manifest.get("format_version") != FORMAT_VERSION or not isinstance(manifest.get("files"), dict):
        raise CheckpointIntegrityError(f"{path} has format_version {manifest.get('format_version')!r}; this verl "
                                       f"reads version {FORMAT_VERSION}")
    return manifest


def check_file(root: str, rel: str, expected: dict[str, Any], hash_contents: bool = True) -> str | None:
    """None when the file matches the manifest, else a message naming it."""
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        return f"checkpoint file {path} is missing (listed in {os.path.join(root, MANIFEST_NAME)})"
    size = os.path.getsize(path)
    if size != expected["size"]:
        return f"checkpoint file {path} is corrupted: {size} bytes, the manifest says {expected['size']}"
    if hash_contents and sha256_of(path) != expected["sha256"]:
        return f"checkpoint file {path} is corrupted: its sha256 does not match the manifest"
    return None


def raise_if_problems(problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 1} more: {'; '.join(problems[1:4])})" if len(problems) > 1 else ""
        raise CheckpointIntegrityError(problems[0] + more + ". Resume from an earlier global_step_N "
                                       "(trainer.resume_mode=resume_path, trainer.resume_from_path=...).")


_warned_origins: set[str] = set()


def foreign_origin(manifest: dict[str, Any]) -> str | None:
    """`user X (uid N) on host H` when the manifest was written by another user or on another host, else None
    (also for manifests written before the writer was recorded)."""
    by = manifest.get("written_by")
    if not isinstance(by, dict):
        return None
    me = writer()
    if by.get("uid") == me["uid"] and by.get("host") == me["host"]:
        return None
    return f"user {by.get('user', '?')} (uid {by.get('uid', '?')}) on host {by.get('host', '?')}"


def warn_if_foreign(root: str) -> str | None:
    """Warn once per folder when its manifest was written by another user or host: loading it unpickles
    torch.distributed.checkpoint metadata, which can run code. Returns the origin it warned about."""
    path = os.path.join(root, MANIFEST_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None  # read_manifest, when the load itself runs, names the problem
    origin = foreign_origin(manifest) if isinstance(manifest, dict) else None
    if origin is None or root in _warned_origins:
        return origin
    _warned_origins.add(root)
    logger.warning("loading checkpoint %s written by %s: its torch.distributed.checkpoint metadata is a pickle, "
                   "which runs code when read. Load checkpoints only from people and machines you trust.", root, origin)
    return origin
