"""The PPO trainer's checkpoints: what the driver saves, in which order a step becomes visible, and resuming.

A save of step N:
  1. the workers write `global_step_N.tmp-<id>/actor` (and `/critic`): DCP shards, LR scheduler, every rank's RNG
  2. the driver writes its TrainerState (verl/trainer/ppo/state.py): `data.pt` (the StatefulDataLoader's state)
     and `trainer_state.pt` (step, KL controller, driver RNG, the batch geometry the data position depends on),
     and the run's identity `run_identity.json` (verl/trainer/ppo/resume_guard.py)
  3. everything is fsynced, the folder renamed to `global_step_N`, then `latest_checkpointed_iteration.txt` is
     replaced atomically: the checkpoint exists for a reader only from this moment on
  4. older checkpoints beyond trainer.max_actor_ckpt_to_keep / max_critic_ckpt_to_keep are removed
A crash anywhere before 3 leaves the previous checkpoint current; the partial folder is removed on the next start.
Saving and that cleanup happen only under the folder's lock (verl/checkpoint/lock.py): one run writes a folder, so
no run removes another's save in progress.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from typing import Any

from verl.checkpoint.atomic import fsync_tree, publish_dir
from verl.checkpoint.identity import write_identity
from verl.checkpoint.layout import (
    find_latest_ckpt_path,
    new_partial_step_dir,
    prune_checkpoints,
    recover_or_remove_partials,
    step_dir,
    step_of,
    write_tracker,
)
from verl.checkpoint.lock import hold_checkpoint_dir
from verl.checkpoint.manifest import MANIFEST_NAME, warn_if_foreign
from verl.trainer.config import TrainerConfig
from verl.trainer.ppo.resume_guard import check_identity, run_identity
from verl.trainer.ppo.state import DATA_FILE, TRAINER_STATE_FILE, TrainerState

logger = logging.getLogger(__name__)

RESUME_MODES = ("auto", "disable", "resume_path")


def checkpoint_root(config) -> str:
    return os.path.abspath(os.path.expanduser(config.trainer.default_local_dir))


def _say(message: str) -> None:
    print(f"[checkpoint] {message}", file=sys.stderr, flush=True)


# -- save ---------------------------------------------------------------------------------------------------------


def _keep_limits(trainer) -> dict[str, int | None]:
    cfg = trainer.config.trainer
    limits = {"actor": cfg.max_actor_ckpt_to_keep}
    if trainer.use_critic:
        limits["critic"] = cfg.max_critic_ckpt_to_keep
    return limits


def _write_parts(trainer, partial: str, step: int, limits: dict[str, int | None]) -> None:
    trainer.actor_rollout_wg.save_checkpoint(os.path.join(partial, "actor"), None, step, limits["actor"])
    if trainer.use_critic:
        trainer.critic_wg.save_checkpoint(os.path.join(partial, "critic"), None, step, limits["critic"])
    trainer.trainer_state().save(partial)
    write_identity(partial, _identity(trainer))
    fsync_tree(partial)


def _identity(trainer) -> dict[str, Any]:
    """The run's identity, computed once (the launcher computes it before Ray; a directly built trainer here)."""
    if getattr(trainer, "run_identity", None) is None:
        trainer.run_identity = run_identity(trainer.config)
    return trainer.run_identity


def save_checkpoint(trainer) -> str:
    """Save the trainer's current step; returns the published `global_step_N` folder."""
    start = time.perf_counter()
    root = checkpoint_root(trainer.config)
    hold_checkpoint_dir(root)  # held since the start (load_checkpoint); never write a folder another run owns
    step = int(trainer.global_steps)
    partial = new_partial_step_dir(root, step)
    os.makedirs(partial)
    limits = _keep_limits(trainer)
    try:
        _write_parts(trainer, partial, step, limits)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # a kill -9 can't do this; the next start then does
        raise
    final = step_dir(root, step)
    publish_dir(partial, final)
    write_tracker(root, step)
    removed = prune_checkpoints(root, limits, protect_step=step)
    _say(f"saved {final} in {time.perf_counter() - start:.1f}s"
         + (f"; removed {len(removed)} old checkpoint folder(s)" if removed else ""))
    return final


# -- load ---------------------------------------------------------------------------------------------------------


def resume_folder(trainer_config: TrainerConfig, root: str) -> str | None:
    """The `global_step_N` folder to resume from under the configured resume_mode, or None to start fresh."""
    mode = trainer_config.resume_mode
    if mode not in RESUME_MODES:
        raise ValueError(f"trainer.resume_mode={mode!r}: use one of {list(RESUME_MODES)}")
    if mode == "disable":
        return None
    if mode == "auto":
        return find_latest_ckpt_path(root)
    path = trainer_config.resume_from_path
    if not path:
        raise ValueError("trainer.resume_mode=resume_path needs trainer.resume_from_path=<.../global_step_N>")
    folder = os.path.abspath(os.path.expanduser(path))
    step_of(folder)  # the name must say which step it is
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"trainer.resume_from_path={path!r}: no such folder")
    return folder


def _required_parts(folder: str, use_critic: bool) -> None:
    needed = [os.path.join(folder, "actor", MANIFEST_NAME), os.path.join(folder, DATA_FILE),
              os.path.join(folder, TRAINER_STATE_FILE)]
    if use_critic:
        needed.append(os.path.join(folder, "critic", MANIFEST_NAME))
    missing = [p for p in needed if not os.path.isfile(p)]
    if missing:
        hint = (" (this run trains a critic; was the checkpoint written by a run without one?)"
                if any(os.sep + "critic" + os.sep in p for p in missing) else "")
        raise FileNotFoundError(f"checkpoint {folder} is incomplete: {', '.join(missing)} missing{hint}. Resume from "
                                "another global_step_N (trainer.resume_mode=resume_path) or set trainer.resume_mode=disable")


def check_compatible(saved: TrainerState, current: TrainerState, folder: str) -> None:
    """Refuse what cannot be resumed faithfully; warn about what resumes but will not repeat the original run."""
    if saved.train_batch_size != current.train_batch_size:
        raise ValueError(
            f"{folder} was written with data.train_batch_size={saved.train_batch_size}, this run has "
            f"{current.train_batch_size}: the saved dataloader position counts batches of {saved.train_batch_size} "
            f"prompts and cannot be mapped. Resume with data.train_batch_size={saved.train_batch_size}, or start a "
            "new run (trainer.resume_mode=disable) from the merged weights (python -m verl.model_merger merge ...).")
    saved_gen = saved.gen_batch_size if saved.gen_batch_size is not None else saved.train_batch_size
    if saved_gen != current.gen_batch_size:
        raise ValueError(
            f"{folder} was written with data.gen_batch_size={saved_gen}, this run has {current.gen_batch_size}: the "
            f"saved dataloader position counts batches of {saved_gen} prompts. Resume with "
            f"data.gen_batch_size={saved_gen}, or start a new run (trainer.resume_mode=disable).")
    if saved.dataset_len != current.dataset_len:
        logger.warning("%s was written with %d training prompts, this run has %d: the data order after resuming "
                       "differs from the original run", folder, saved.dataset_len, current.dataset_len)
    if saved.world_size != current.world_size:
        _say(f"{folder} was written by {saved.world_size} workers, this run has {current.world_size}: weights and "
             "optimizer state are resharded; sampling RNG streams start fresh")


def _warn_if_sampler_not_resumable(trainer, data_state: dict[str, Any]) -> None:
    """torch's own RandomSampler does not save its generator: a mid-epoch resume would replay the wrong order."""
    from torch.utils.data import RandomSampler

    sampler = getattr(trainer.train_dataloader, "sampler", None)
    # a StatefulDataLoader state dict (a real dict, not config)
    mid_epoch = 0 < int(data_state.get("_sampler_iter_yielded") or 0) < len(trainer.train_dataloader)
    if type(sampler) is RandomSampler and mid_epoch:
        logger.warning("resuming mid-epoch with torch.utils.data.RandomSampler, which does not checkpoint its "
                       "generator: the rest of this epoch will see a different order than the original run. Use "
                       "torchdata.stateful_dataloader.sampler.RandomSampler for an exact resume.")


def load_checkpoint(trainer) -> int:
    """Clean up after a crash, then restore the workers and the trainer's state; returns the step resumed from
    (0 when starting fresh)."""
    cfg = trainer.config.trainer
    root = checkpoint_root(trainer.config)
    hold_checkpoint_dir(root)  # before the cleanup: a `.tmp-*` folder here is then no live run's save in progress
    recover_or_remove_partials(root)
    folder = resume_folder(cfg, root)
    if folder is None:
        if cfg.resume_mode == "auto":
            _say(f"no checkpoint in {root}: training from scratch")
        return 0
    start = time.perf_counter()
    _required_parts(folder, trainer.use_critic)
    if getattr(trainer, "identity_checked", None) != folder:  # the launcher checked it before Ray
        check_identity(folder, _identity(trainer), cfg.resume_mode)
    for role in ("actor", "critic") if trainer.use_critic else ("actor",):
        warn_if_foreign(os.path.join(folder, role))
    saved = TrainerState.load(folder)
    check_compatible(saved, trainer.trainer_state(), folder)
    trainer.actor_rollout_wg.load_checkpoint(os.path.join(folder, "actor"), None, False)
    if trainer.use_critic:
        trainer.critic_wg.load_checkpoint(os.path.join(folder, "critic"), None, False)
    _warn_if_sampler_not_resumable(trainer, saved.dataloader)
    saved.global_steps = step_of(folder)  # the folder's name is what the tracker file and pruning go by
    trainer.restore_state(saved)
    left = max(0, int(trainer.total_training_steps) - trainer.global_steps)
    _say(f"resumed from {folder} (step {trainer.global_steps}, {left} step(s) to go) in "
         f"{time.perf_counter() - start:.1f}s")
    return trainer.global_steps
