"""A run's identity, recorded in every checkpoint (`run_identity.json`) so that a resume can tell whether the
checkpoint it found belongs to the run being started.

The identity is a flat mapping of named entries: what defines the run (the model's config.json and weight files,
the algorithm's loss-shaping keys, the training files, the world layout) and, apart from it, the paths those came
from (shown in messages; a moved model or data folder with the same content is the same run).

Files are fingerprinted by size plus a sha256 of their first and last MiB: cheap for a 100 GB model, blind to
mtimes (regenerating identical data does not change it), and any edit that changes the size or touches either end
changes it. An edit confined to the middle of a file of the same size is not seen; that is the price of not
reading whole datasets and models at every start.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from typing import Any

from verl.checkpoint.atomic import atomic_write_text

IDENTITY_FILE = "run_identity.json"
IDENTITY_VERSION = 1
_EDGE = 1 << 20
_WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


def file_fingerprint(path: str) -> str:
    """`<size> bytes, ends sha256 <16 hex>` of a file, or `missing` when there is none."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(path):
        return "missing"
    size = os.path.getsize(path)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read(_EDGE))
        if size > _EDGE:
            f.seek(max(_EDGE, size - _EDGE))
            digest.update(f.read(_EDGE))
    return f"{size} bytes, ends sha256 {digest.hexdigest()[:16]}"


def model_fingerprint(model_path: str | None) -> dict[str, str]:
    """The model folder's config.json (whole-file sha256) and its weight files (fingerprints, combined)."""
    if not model_path:
        return {"config.json": "unresolved", "weights": "unresolved"}
    folder = os.path.abspath(os.path.expanduser(model_path))
    config = os.path.join(folder, "config.json")
    if os.path.isfile(config):
        with open(config, "rb") as f:
            config_hash = "sha256 " + hashlib.sha256(f.read()).hexdigest()[:16]
    else:
        config_hash = "missing"
    weights = sorted({p for pattern in _WEIGHT_PATTERNS for p in glob.glob(os.path.join(folder, pattern))})
    if not weights:
        return {"config.json": config_hash, "weights": "no weight files"}
    combined = hashlib.sha256()
    total = 0
    for path in weights:
        combined.update(f"{os.path.basename(path)}:{file_fingerprint(path)}\n".encode())
        total += os.path.getsize(path)
    return {"config.json": config_hash,
            "weights": f"{len(weights)} file(s), {total} bytes, ends sha256 {combined.hexdigest()[:16]}"}


def write_identity(folder: str, identity: dict[str, Any]) -> str:
    path = os.path.join(folder, IDENTITY_FILE)
    atomic_write_text(path, json.dumps({"version": IDENTITY_VERSION, **identity}, indent=1, sort_keys=True))
    return path


def read_identity(folder: str) -> dict[str, Any] | None:
    """The identity a checkpoint was written with, or None for checkpoints written before identities were kept."""
    path = os.path.join(folder, IDENTITY_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, ValueError) as err:
        raise ValueError(f"{path} is unreadable ({err}); resume from another global_step_N folder "
                         "(trainer.resume_mode=resume_path) or delete the file to skip the identity check") from err
    if not isinstance(body, dict) or not isinstance(body.get("defining"), dict):
        raise ValueError(f"{path} is not a run identity written by verl (no 'defining' entries)")
    return body


def identity_differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """One line per defining entry that differs, `name: saved -> now`, with the paths where they help."""
    before, now = saved.get("defining", {}), current.get("defining", {})
    where_before, where_now = saved.get("paths", {}), current.get("paths", {})
    lines = []
    for key in sorted(set(before) | set(now)):
        old, new = before.get(key, "<not recorded>"), now.get(key, "<not set>")
        if old == new:
            continue
        group = key.split(" ", 1)[0]  # "actor_rollout_ref.model.path weights" -> the path it belongs to
        if group in where_before or group in where_now:
            old = f"{where_before.get(group, '?')} ({old})"
            new = f"{where_now.get(group, '?')} ({new})"
        lines.append(f"{key}: {old} -> {new}")
    return lines


def moved_paths(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Paths that changed while their content did not (a moved folder): worth a note, not a refusal."""
    before, now = saved.get("paths", {}), current.get("paths", {})
    return [f"{key}: {before[key]} -> {now[key]}" for key in sorted(set(before) & set(now)) if before[key] != now[key]]
