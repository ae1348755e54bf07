"""What every checkpoint manager shares: the contents to save/load and the process-group helpers.

`checkpoint.save_contents` / `checkpoint.load_contents` pick from:
    model      the sharded weights (torch.distributed.checkpoint)
    optimizer  the sharded optimizer state
    extra      the LR scheduler and every rank's RNG states
    hf_model   a full HF folder (safetensors + config + tokenizer) next to the shards, gathered on rank 0
The HF config and tokenizer are always written (the merger needs them); only the full weights are optional.
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from verl.checkpoint.rng import get_rng_state, set_rng_state

logger = logging.getLogger(__name__)

CONTENTS = ("model", "optimizer", "extra", "hf_model")
DEFAULT_CONTENTS = ("model", "optimizer", "extra")


def _as_list(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def checked_contents(value: Any, key: str, default: Iterable[str] = DEFAULT_CONTENTS) -> tuple[str, ...]:
    items = _as_list(value)
    if items is None:
        return tuple(default)
    unknown = [c for c in items if c not in CONTENTS]
    if unknown:
        raise ValueError(f"{key} has {unknown}; choose from {list(CONTENTS)}")
    return tuple(dict.fromkeys(items))



class BaseCheckpointManager:
    """Saves and loads one role's training state; subclasses decide the on-disk format.

    Args:
        model: the (FSDP-wrapped) module.
        optimizer, lr_scheduler: may be None for a role that does not train.
        processing_class: the tokenizer (or processor) saved with the HF config; may be None.
        checkpoint_config: the role's typed `checkpoint` section (CheckpointConfig: save_contents, load_contents).
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 lr_scheduler: Any = None, processing_class: Any = None, checkpoint_config: Any = None) -> None:
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.processing_class = processing_class
        self.checkpoint_config = checkpoint_config
        # upstream's retention bookkeeping: the folders this manager saved (or was told about), oldest first
        self.previous_saved_paths: list[str] = []
        # None (no section): save and load the defaults
        save = checkpoint_config.save_contents if checkpoint_config is not None else None
        load = checkpoint_config.load_contents if checkpoint_config is not None else None
        self.save_contents = checked_contents(save, "checkpoint.save_contents")
        self.load_contents = checked_contents(load, "checkpoint.load_contents", default=self.save_contents)
        if optimizer is None:  # a frozen role: nothing to train, so no optimizer state to keep
            self.save_contents = tuple(c for c in self.save_contents if c != "optimizer")
            self.load_contents = tuple(c for c in self.load_contents if c != "optimizer")

    # upstream verl's names for the content checks
    @property
    def should_save_model(self) -> bool:
        return "model" in self.save_contents

    @property
    def should_save_optimizer(self) -> bool:
        return "optimizer" in self.save_contents

    @property
    def should_save_extra(self) -> bool:
        return "extra" in self.save_contents

    @property
    def should_save_hf_model(self) -> bool:
        return "hf_model" in self.save_contents

    @property
    def should_load_model(self) -> bool:
        return "model" in self.load_contents

    @property
    def should_load_optimizer(self) -> bool:
        return "optimizer" in self.load_contents

    @property
    def should_load_extra(self) -> bool:
        return "extra" in self.load_contents

    @property
    def rank(self) -> int:
        return dist.get_rank() if dist.is_initialized() else 0

    @property
    def world_size(self) -> int:
        return dist.get_world_size() if dist.is_initialized() else 1

    def barrier(self) -> None:
        if dist.is_initialized():
            dist.barrier()

    def all_gather_object(self, obj: Any) -> list[Any]:
        if not dist.is_initialized():
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out

    # upstream spelling; `save`/`load` are the short forms
    def save_checkpoint(self, local_path: str, hdfs_path: str | None = None, global_step: int = 0,
                        max_ckpt_to_keep: int | None = None) -> None:
        raise NotImplementedError

    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False) -> None:
        raise NotImplementedError

    def save(self, local_path: str, global_step: int = 0) -> None:
        self.save_checkpoint(local_path, global_step=global_step)

    def load(self, local_path: str) -> None:
        self.load_checkpoint(local_path)

    # ---- retention (upstream's names) ----------------------------------------------------------------------------
    def remove_previous_save_local_path(self, path: str | list[str]) -> None:
        """Delete one checkpoint folder or several (a missing one is skipped)."""
        for p in [path] if isinstance(path, str) else path:
            if os.path.exists(p):
                logger.info("removing old checkpoint %s", os.path.abspath(p))
                shutil.rmtree(p, ignore_errors=True)

    def _keep_newest(self, count: int) -> None:
        excess = len(self.previous_saved_paths) - count
        if excess > 0:
            self.remove_previous_save_local_path(self.previous_saved_paths[:excess])
            self.previous_saved_paths = self.previous_saved_paths[excess:]

    def ensure_checkpoint_capacity(self, max_ckpt_to_keep: int | None, incoming_path: str | None = None) -> None:
        """Before a save: with ``max_ckpt_to_keep = k >= 2`` keep the newest k-1 saved folders, so the new one fits.
        With k = 1 nothing is deleted yet (the only checkpoint survives until the new save has succeeded, see
        ``register_checkpoint``); 0 or None keeps everything."""
        if isinstance(max_ckpt_to_keep, int) and max_ckpt_to_keep > 1:
            self._keep_newest(max_ckpt_to_keep - 1)

    def register_checkpoint(self, new_path: str, max_ckpt_to_keep: int | None) -> None:
        """After a successful save: record `new_path` and keep only the newest ``max_ckpt_to_keep`` folders
        (0 or None: keep all)."""
        if new_path not in self.previous_saved_paths:
            self.previous_saved_paths.append(new_path)
        if isinstance(max_ckpt_to_keep, int) and max_ckpt_to_keep > 0:
            self._keep_newest(max_ckpt_to_keep)

    @staticmethod
    def get_rng_state() -> dict[str, Any]:
        return get_rng_state()

    @staticmethod
    def load_rng_state(rng_state: dict[str, Any]) -> None:
        set_rng_state(rng_state)

    @staticmethod
    def local_mkdir(path: str) -> str:
        path = os.path.abspath(os.path.expanduser(path))
        os.makedirs(path, exist_ok=True)
        return path


# Environment variables that hold the end of a reserved capacity block, as a unix timestamp (seconds).
ESI_EXPIRATION_ENV = ("MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP",  # Volcano Engine ML platform
                      "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP")  # AWS SageMaker


def should_save_ckpt_esi(max_steps_duration: float, save_ckpt_duration: float = 60,
                         redundant_time: float = 0) -> bool:
    """True when the machine's reserved capacity ends before one more step and a save could both finish: the time
    left (from the first variable of ``ESI_EXPIRATION_ENV`` that is set) is positive and at most
    ``max_steps_duration + save_ckpt_duration + redundant_time`` seconds. False when no variable is set, its value
    is not a number, the block has already ended, or ``max_steps_duration`` is not positive (no step timed yet)."""
    for name in ESI_EXPIRATION_ENV:
        value = os.environ.get(name)
        if value:
            break
    else:
        return False
    try:
        remaining = float(value) - time.time()
    except ValueError:
        logger.warning("%s=%r is not a unix timestamp; no expiry save", name, value)
        return False
    return 0 < remaining <= max_steps_duration + save_ckpt_duration + redundant_time and max_steps_duration > 0
