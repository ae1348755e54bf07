"""The trainer's side of a worker-group failure: the deadlines it gives the groups, and where the run can resume.

A hung or dead worker ends the run (the group raises WorkerDeadlineError / WorkerGroupError); the note added here
tells the operator which checkpoint a restart resumes from, read without touching the folder (no partial-save cleanup
while another process may still be writing).
"""

from __future__ import annotations

import os

from verl.checkpoint.layout import read_tracker, step_dir
from verl.single_controller.base.deadlines import WorkerDeadlines
from verl.trainer.config import TrainerConfig


def worker_deadlines(trainer: TrainerConfig) -> WorkerDeadlines:
    """trainer.ray_wait_register_center_timeout for start-up; worker_call_timeout_s (+ per sample) for calls."""
    return WorkerDeadlines.from_trainer(trainer)


def last_checkpoint_note(root: str) -> str:
    """Which complete checkpoint under `root` (trainer.default_local_dir) a restart resumes from, or that none."""
    try:
        step = read_tracker(root) if os.path.isdir(root) else None
    except (OSError, ValueError) as err:
        return f"the checkpoint tracker under {root} could not be read ({err})"
    if step is None:
        return (f"there is no complete checkpoint in {root} (trainer.default_local_dir); a restart begins from step 0"
                " (set trainer.save_freq to save during training)")
    folder = step_dir(root, step)
    if not os.path.isdir(folder):
        return f"{root}'s tracker names step {step}, but {folder} is missing"
    return (f"the last complete checkpoint is {folder} (step {step}), untouched; restarting with "
            "trainer.resume_mode=auto resumes from it")


def add_checkpoint_note(err: BaseException, trainer: TrainerConfig) -> None:
    """Once per error: where the run stands, for a failure that ends it."""
    root = os.path.abspath(os.path.expanduser(trainer.default_local_dir))
    if not any("last complete checkpoint" in n or "no complete checkpoint" in n for n in getattr(err, "__notes__", [])):
        err.add_note(last_checkpoint_note(root))
