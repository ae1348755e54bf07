"""Where checkpoints live on disk and which one is current.

    <default_local_dir>/
        latest_checkpointed_iteration.txt      the step of the newest complete checkpoint (written last)
        global_step_N/
            actor/  critic/                      one folder per trained role (see fsdp_checkpoint_manager.py)
            data.pt                              the train dataloader's state_dict()
            trainer_state.pt                     driver-side state: step, KL controller, RNG, batch geometry
        global_step_N.tmp-<id>/                  a save in progress; never read, removed on the next start

The tracker file is the single source of truth: a folder it does not name is not resumed from.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid

from verl.checkpoint.atomic import atomic_write_text

logger = logging.getLogger(__name__)

TRACKER_FILENAME = "latest_checkpointed_iteration.txt"
STEP_DIR_FORMAT = "global_step_{}"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
_PARTIAL_DIR = re.compile(r"^global_step_(\d+)\.(tmp|old)-[0-9a-f]+$")
_PARTIAL_FILE = re.compile(r"^\..+\.tmp-[0-9a-f]+$")


def get_checkpoint_tracker_filename(root_path: str) -> str:
    return os.path.join(root_path, TRACKER_FILENAME)


def step_dir(root_path: str, step: int) -> str:
    return os.path.join(root_path, STEP_DIR_FORMAT.format(int(step)))


def new_partial_step_dir(root_path: str, step: int) -> str:
    """A fresh folder name for a save in progress (unique, so a crashed save never collides with a new one)."""
    return f"{step_dir(root_path, step)}.tmp-{uuid.uuid4().hex[:8]}"


def step_of(path: str) -> int:
    """The N of a `.../global_step_N` folder; ValueError naming the path otherwise."""
    match = _STEP_DIR.match(os.path.basename(os.path.normpath(path)))
    if not match:
        raise ValueError(f"{path!r} is not a checkpoint folder: its name must be global_step_<N>")
    return int(match.group(1))


def read_tracker(root_path: str) -> int | None:
    """The step named by the tracker file, or None when there is none (no checkpoint yet)."""
    tracker = get_checkpoint_tracker_filename(root_path)
    if not os.path.exists(tracker):
        return None
    with open(tracker, encoding="utf-8") as f:
        text = f.read().strip()
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{tracker} should hold one step number but holds {text[:80]!r}; fix or delete it, or set "
                         "trainer.resume_mode=resume_path with trainer.resume_from_path=<a global_step_N folder>") from None


def write_tracker(root_path: str, step: int) -> None:
    """Atomically point the tracker at `step` (temp file, fsync, os.replace): readers never see a torn number."""
    atomic_write_text(get_checkpoint_tracker_filename(root_path), str(int(step)))


def find_latest_ckpt_path(path: str, directory_format: str = STEP_DIR_FORMAT) -> str | None:
    """The folder of the newest complete checkpoint under `path`, or None when nothing was checkpointed there.

    A tracker that names a missing folder is an error, not "no checkpoint": silently starting over would throw
    the run's progress away.
    """
    if not path or not os.path.isdir(path):
        return None
    recover_or_remove_partials(path)
    step = read_tracker(path)
    if step is None:
        return None
    folder = os.path.join(path, directory_format.format(step))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{get_checkpoint_tracker_filename(path)} names step {step} but {folder} does not "
                                "exist; point trainer.resume_from_path at an existing global_step_N folder "
                                "(trainer.resume_mode=resume_path) or set trainer.resume_mode=disable")
    return folder


def recover_or_remove_partials(root_path: str) -> list[str]:
    """Clean up after a crash: drop half-written `global_step_N.tmp-*` folders and temp files; a
    `global_step_N.old-*` folder (moved aside while N was being re-saved) goes back in place if N is missing.

    Returns the removed paths. Only this run's checkpoint folder is touched, and only names this module creates.
    """
    removed: list[str] = []
    if not os.path.isdir(root_path):
        return removed
    for name in sorted(os.listdir(root_path)):
        full = os.path.join(root_path, name)
        match = _PARTIAL_DIR.match(name)
        if match and os.path.isdir(full):
            final = step_dir(root_path, int(match.group(1)))
            if match.group(2) == "old" and not os.path.exists(final):
                os.rename(full, final)
                logger.warning("restored %s from %s (a re-save of that step was interrupted)", final, full)
                continue
            shutil.rmtree(full, ignore_errors=True)
            removed.append(full)
        elif _PARTIAL_FILE.match(name) and os.path.isfile(full):
            os.remove(full)
            removed.append(full)
    if removed:
        logger.warning("removed %d incomplete checkpoint item(s) left by an interrupted save: %s", len(removed),
                       ", ".join(os.path.basename(p) for p in removed))
    return removed


def list_step_dirs(root_path: str) -> list[tuple[int, str]]:
    """(step, folder) of every published checkpoint under root, oldest first."""
    if not os.path.isdir(root_path):
        return []
    found = []
    for name in os.listdir(root_path):
        match = _STEP_DIR.match(name)
        if match and os.path.isdir(os.path.join(root_path, name)):
            found.append((int(match.group(1)), os.path.join(root_path, name)))
    return sorted(found)


def prune_checkpoints(root_path: str, keep: dict[str, int | None], protect_step: int) -> list[str]:
    """Keep the newest `keep[role]` copies of each role's folder (None or <= 0: keep all); a step folder with no
    role folder left is removed whole. The checkpoint at `protect_step` (the current one) is never touched."""
    removed: list[str] = []
    steps = [(s, d) for s, d in list_step_dirs(root_path) if s != protect_step]
    for role, limit in keep.items():
        if not limit or limit <= 0:
            continue
        holders = [(s, d) for s, d in steps if os.path.isdir(os.path.join(d, role))]
        # the protected (current) checkpoint counts toward the limit
        excess = len(holders) + 1 - limit
        for _step, folder in holders[:max(0, excess)]:
            shutil.rmtree(os.path.join(folder, role))
            removed.append(os.path.join(folder, role))
    for _step, folder in steps:
        if os.path.isdir(folder) and not any(os.path.isdir(os.path.join(folder, role)) for role in keep):
            shutil.rmtree(folder)
            removed.append(folder)
    return removed
