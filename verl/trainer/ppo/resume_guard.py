"""Resume only the same run: the identity a PPO run records in its checkpoints, and the checks a start makes on
the driver before Ray and the workers (see docs/reliability.md, "resume identity").

At start, in the first seconds (`early_checks`, before the tokenizer and the data are loaded):
  1. the checkpoint resume_mode would load is found without modifying the folder;
  2. its recorded identity is compared with this run's: under resume_mode=auto a difference refuses the start,
     listing the differences and the overrides; under resume_mode=resume_path it is a warning (an explicit choice);
  3. a live holder of the folder's lock refuses the start (probed: nothing is written);
then, with the datasets built (`preflight`):
  4. a checkpoint at the last step means the run is finished: `RunFinished` (the launcher exits 0, nothing written);
  5. otherwise the folder's lock is taken (verl/checkpoint/lock.py) before anything is written there.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from typing import Any

from verl.checkpoint.identity import (
    file_fingerprint,
    identity_differences,
    model_fingerprint,
    moved_paths,
    read_identity,
)
from verl.checkpoint.layout import read_tracker, step_dir, step_of
from verl.checkpoint.lock import probe_checkpoint_dir

logger = logging.getLogger(__name__)


class ResumeRefused(RuntimeError):
    """The checkpoint found under trainer.default_local_dir was written by a different run."""


class RunFinished(Exception):
    """The checkpoint to resume from is at the run's last step: nothing to train."""

    def __init__(self, message: str, step: int, total: int, folder: str) -> None:
        super().__init__(message)
        self.step, self.total, self.folder = step, total, folder


def _algorithm_keys(config) -> dict[str, Any]:
    """The keys that change what is optimised: a checkpoint trained under other ones is another experiment.
    Learning rates, clip ratios and coefficients are left out: changing them on resume is a legitimate choice."""
    alg, actor = config.algorithm, config.actor_rollout_ref.actor
    keys: dict[str, Any] = {
        "algorithm.adv_estimator": alg.adv_estimator,
        "actor_rollout_ref.actor.policy_loss.loss_mode": actor.policy_loss.loss_mode,
        "actor_rollout_ref.actor.loss_agg_mode": actor.loss_agg_mode,
        "actor_rollout_ref.actor.use_kl_loss": actor.use_kl_loss,
        "algorithm.use_kl_in_reward": alg.use_kl_in_reward,
        "actor_rollout_ref.rollout.n": config.actor_rollout_ref.rollout.n,
        # the adapter's shape is the checkpoint's parameter set
        "actor_rollout_ref.model.lora_rank": config.actor_rollout_ref.model.lora_rank,
    }
    if actor.use_kl_loss:
        keys["actor_rollout_ref.actor.kl_loss_type"] = actor.kl_loss_type
    if alg.use_kl_in_reward:
        keys["algorithm.kl_penalty"] = alg.kl_penalty
    return keys


def run_identity(config) -> dict[str, Any]:
    """This run's identity (see verl/checkpoint/identity.py): JSON-able, cheap (reads 2 MiB per file)."""
    model_path = config.actor_rollout_ref.model.path
    model = model_fingerprint(model_path)
    train_files = list(config.data.train_files or [])
    trainer = config.trainer
    defining: dict[str, Any] = {
        "actor_rollout_ref.model.path config.json": model["config.json"],
        "actor_rollout_ref.model.path weights": model["weights"],
        "data.train_files": [file_fingerprint(p) for p in train_files],
        "trainer.nnodes": trainer.nnodes,
        "trainer.n_gpus_per_node": trainer.n_gpus_per_node,
        **_algorithm_keys(config),
    }
    paths = {"actor_rollout_ref.model.path": os.path.abspath(os.path.expanduser(model_path)) if model_path else None,
             "data.train_files": [os.path.abspath(os.path.expanduser(p)) for p in train_files]}
    return {"defining": defining, "paths": paths}


def planned_total_steps(config, n_train_prompts: int) -> int:
    """The run's step count as RayPPOTrainer computes it (full batches only, drop_last) before it exists."""
    if config.trainer.total_training_steps:
        return int(config.trainer.total_training_steps)
    return (n_train_prompts // config.data.resolved_gen_batch_size) * config.trainer.total_epochs


def _overrides(folder: str) -> str:
    return ("To continue that run, start it with the settings it was written with. To start a new run, give it its "
            "own folder: trainer.experiment_name=<new name> (the default trainer.default_local_dir follows it) or "
            "trainer.default_local_dir=<another folder>. To load this checkpoint on purpose anyway, set "
            f"trainer.resume_mode=resume_path trainer.resume_from_path={folder} (a different identity is then "
            "accepted with a warning).")


def check_identity(folder: str, current: dict[str, Any], resume_mode: str) -> list[str]:
    """Compare `folder`'s recorded identity with `current`; refuse (auto) or warn (resume_path) on differences.
    Returns the differences."""
    saved = read_identity(folder)
    if saved is None:
        logger.warning("%s records no run identity (written by an older verl): resuming without checking that it "
                       "belongs to this run", folder)
        return []
    differences = identity_differences(saved, current)
    if not differences:
        moved = moved_paths(saved, current)
        if moved:
            logger.warning("resuming %s, whose files have the same content at other paths: %s", folder,
                           "; ".join(moved))
        return []
    listing = "\n".join(f"  - {line}" for line in differences)
    if resume_mode == "resume_path":
        print(f"[checkpoint] WARNING: trainer.resume_from_path={folder} was written by a different run; loading it "
              f"as asked (trainer.resume_mode=resume_path). Differences (checkpoint -> this run):\n{listing}",
              file=sys.stderr, flush=True)
        return differences
    raise ResumeRefused(
        f"refusing to resume {folder}: trainer.resume_mode=auto found it in trainer.default_local_dir, but it was "
        f"written by a different run. Differences (checkpoint -> this run):\n{listing}\n{_overrides(folder)}")


def _folder_to_resume(trainer_cfg, root: str) -> str | None:
    """The folder resume_mode points at, found read-only (cleanup after a crash waits for the folder's lock)."""
    mode = trainer_cfg.resume_mode
    if mode == "disable":
        return None
    if mode == "resume_path":
        if not trainer_cfg.resume_from_path:
            return None  # checkpointing.resume_folder names the missing key at load
        folder = os.path.abspath(os.path.expanduser(trainer_cfg.resume_from_path))
        step_of(folder)
        return folder if os.path.isdir(folder) else None
    step = read_tracker(root) if os.path.isdir(root) else None
    if step is None:
        return None
    folder = step_dir(root, step)
    return folder if os.path.isdir(folder) else None  # a dangling tracker is named at load


@dataclass
class Preflight:
    identity: dict[str, Any]  # this run's, to record in its checkpoints
    checked_folder: str | None  # the checkpoint whose identity was checked (None: nothing to resume was found)


def early_checks(config) -> Preflight:
    """Steps 1-3 of the module docstring; raises ResumeRefused or CheckpointDirLocked. Needs the model path resolved."""
    identity = run_identity(config)
    trainer_cfg = config.trainer
    root = os.path.abspath(os.path.expanduser(trainer_cfg.default_local_dir))
    folder = _folder_to_resume(trainer_cfg, root)
    if folder is not None:
        check_identity(folder, identity, trainer_cfg.resume_mode)
    probe_checkpoint_dir(root)
    return Preflight(identity, folder)


def preflight(config, n_train_prompts: int, early: Preflight | None = None) -> Preflight:
    """Step 4 of the module docstring (and steps 1-3 unless `early` has them). Raises ResumeRefused,
    CheckpointDirLocked or RunFinished. The lock (step 5) is the caller's next move."""
    checked = early if early is not None else early_checks(config)
    folder = checked.checked_folder
    if folder is None:
        return checked
    step, total = step_of(folder), planned_total_steps(config, n_train_prompts)
    if total > 0 and step >= total:
        raise RunFinished(
            f"run already finished at step {step}/{total}; nothing to do (checkpoint {folder}). To train further, "
            "raise trainer.total_training_steps or trainer.total_epochs; for a new run, set "
            "trainer.experiment_name=<new name> or trainer.default_local_dir=<another folder>.", step, total, folder)
    return checked
