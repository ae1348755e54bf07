"""Checkpoints of an FSDP2 (`fully_shard`) role with torch.distributed.checkpoint (DCP).

One role's folder (`global_step_N/actor`, `.../critic`):

    model/                                   DCP: every rank's weight shards + .metadata (global shapes)
    optimizer/                               DCP: the optimizer state, sharded the same way
    extra_state_world_size_W_rank_R.pt       LR scheduler + that rank's RNG states (torch, numpy, random) + the
                                             role's step state (its update counter: it seeds the mini-batch shuffle)
    huggingface/                             config.json, generation_config.json, tokenizer (+ weights with hf_model)
    lora_adapter/                            LoRA roles: the peft adapter (adapter_config.json + safetensors)
    manifest.json                            every file above with size and sha256; written last

DCP stores global shapes, so a checkpoint loads into any world size (resharding); the RNG streams are restored
only when the world size is unchanged. Every rank calls `save_checkpoint`/`load_checkpoint` together.

A LoRA (peft) role keeps its whole module in `model/` (frozen base and adapter: resuming needs nothing else),
adds the adapter alone as a peft folder that `lora_adapter_path` and `PeftModel.from_pretrained` load, and writes
merged weights (W + scaling * B @ A) under the base model's names in `huggingface/`. The peft specifics come from
the worker as an `AdapterIO` (verl.models.lora.PeftAdapterIO): this layer does not import the models layer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any, Protocol

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from verl.checkpoint.atomic import atomic_torch_save
from verl.checkpoint.checkpoint_manager import BaseCheckpointManager
from verl.checkpoint.hf_export import (
    HF_SUBDIR,
    hf_config_of,
    save_hf_metadata,
    save_hf_weights,
    unwrapped_model_class,
)
from verl.checkpoint.manifest import (
    check_file,
    describe_files,
    list_files,
    raise_if_problems,
    read_manifest,
    write_manifest,
)
from verl.checkpoint.rng import get_rng_state, set_rng_state

logger = logging.getLogger(__name__)

MODEL_DIR = "model"
OPTIMIZER_DIR = "optimizer"
ADAPTER_DIR = "lora_adapter"  # the same name as verl.models.lora.ADAPTER_DIR (the SFT trainer's too)


class AdapterIO(Protocol):
    """A trained adapter's view of the module, given by the worker for peft modules."""

    @property
    def hf_model(self) -> torch.nn.Module: ...  # the HF model inside the wrapper: its class and config

    def merged_state(self, full_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]: ...

    def save_adapter(self, folder: str, full_state: Mapping[str, torch.Tensor]) -> None: ...


class StepState(Protocol):
    """Counters of a role that shape its next step (the actor's and critic's update counts, which seed the
    mini-batch shuffle): plain ints, saved in the extra state and restored with it."""

    def step_state(self) -> dict[str, int]: ...

    def load_step_state(self, state: Mapping[str, int]) -> None: ...


def extra_state_name(world_size: int, rank: int) -> str:
    return f"extra_state_world_size_{world_size}_rank_{rank}.pt"


def _has_state(optimizer: torch.optim.Optimizer | None) -> bool:
    return optimizer is not None and len(optimizer.state) > 0


class FSDPCheckpointManager(BaseCheckpointManager):
    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, lr_scheduler: Any = None,
                 processing_class: Any = None, checkpoint_config: Any = None, adapter: AdapterIO | None = None,
                 step_state: StepState | None = None) -> None:
        super().__init__(model, optimizer, lr_scheduler, processing_class, checkpoint_config)
        self.adapter = adapter
        self.step_state = step_state

    @property
    def hf_model(self) -> torch.nn.Module:
        """The module whose class and config the HF folder records (inside a peft wrapper for LoRA roles)."""
        return self.adapter.hf_model if self.adapter is not None else self.model

    # -- save -----------------------------------------------------------------------------------------------------

    def save_checkpoint(self, local_path: str, hdfs_path: str | None = None, global_step: int = 0,
                        max_ckpt_to_keep: int | None = None) -> None:
        """Write this role's state into `local_path` (a fresh folder; the trainer publishes it atomically).

        `max_ckpt_to_keep` is accepted for upstream's signature; old checkpoints are pruned by the trainer once the
        new one is published (verl.trainer.ppo.checkpointing), never before.
        """
        if hdfs_path:
            raise NotImplementedError("copying checkpoints to HDFS is not supported; leave trainer.default_hdfs_dir "
                                      "null and copy global_step_N folders yourself")
        local_path = self.local_mkdir(local_path)
        self.barrier()
        if self.should_save_model:
            dcp.save({"model": get_model_state_dict(self.model)}, checkpoint_id=os.path.join(local_path, MODEL_DIR))
        # An optimizer that never stepped has no state; DCP would invent one with a zero-lr step, changing Adam's
        # step count, so nothing is written and loading keeps the fresh optimizer (the same thing).
        optimizer_state = self.should_save_optimizer and _has_state(self.optimizer)
        if optimizer_state:
            dcp.save({"optimizer": get_optimizer_state_dict(self.model, self.optimizer)},
                     checkpoint_id=os.path.join(local_path, OPTIMIZER_DIR))
        if self.should_save_extra:
            atomic_torch_save(self._extra_state(), os.path.join(local_path, extra_state_name(self.world_size, self.rank)))
        self._save_hf(os.path.join(local_path, HF_SUBDIR))
        if self.adapter is not None and self.should_save_model:
            self._save_adapter(os.path.join(local_path, ADAPTER_DIR))
        self.barrier()
        self._write_manifest(local_path, global_step, optimizer_state)

    def _extra_state(self) -> dict[str, Any]:
        scheduler = self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None
        state = {"lr_scheduler": scheduler, "rng": get_rng_state(), "world_size": self.world_size, "rank": self.rank}
        if self.step_state is not None:
            state["step_state"] = {k: int(v) for k, v in self.step_state.step_state().items()}
        return state

    def _save_hf(self, hf_dir: str) -> None:
        hf_model = self.hf_model
        if self.rank == 0:
            save_hf_metadata(hf_model, self.processing_class, hf_dir)
        if self.should_save_hf_model:
            # a collective: every rank sends its shards, only rank 0 keeps the (CPU) full copy
            full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            if self.rank == 0:
                if self.adapter is not None:
                    full = self.adapter.merged_state(full)
                save_hf_weights(unwrapped_model_class(hf_model), hf_config_of(hf_model), full, hf_dir)
            del full

    def _save_adapter(self, adapter_dir: str) -> None:
        """The trainable tensors only (adapter matrices, modules_to_save), gathered one by one in parameter order
        on every rank (collectives), written by rank 0 as a peft folder."""
        trained = {}
        for name, param in self.model.named_parameters():
            if param.requires_grad:
                full = param.detach().full_tensor() if hasattr(param, "full_tensor") else param.detach()
                trained[name] = full.cpu()
        if self.rank == 0:
            self.adapter.save_adapter(adapter_dir, trained)

    def _write_manifest(self, local_path: str, global_step: int, optimizer_state: bool) -> None:
        files = list_files(local_path)  # every rank sees the same list: all writes finished at the barrier
        described: dict[str, dict[str, Any]] = {}
        for part in self.all_gather_object(describe_files(local_path, files[self.rank::self.world_size])):
            described.update(part)
        if self.rank == 0:
            contents = [c for c in self.save_contents if c != "optimizer" or optimizer_state]
            write_manifest(local_path, described, {
                "global_step": int(global_step), "world_size": self.world_size, "contents": contents,
                "model_class": unwrapped_model_class(self.hf_model).__name__,
                "optimizer_requested": self.should_save_optimizer})
        self.barrier()

    # -- load -----------------------------------------------------------------------------------------------------

    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False) -> None:
        """Restore what `checkpoint.load_contents` names from a folder written by `save_checkpoint`."""
        if hdfs_path:
            raise NotImplementedError("loading checkpoints from HDFS is not supported; copy the folder locally")
        local_path = os.path.abspath(os.path.expanduser(local_path))
        manifest = read_manifest(local_path)
        contents = self._contents_to_load(manifest, local_path)
        self._verify(local_path, manifest, contents)
        if "model" in contents:
            state = get_model_state_dict(self.model)
            self._dcp_load({"model": state}, os.path.join(local_path, MODEL_DIR))
            set_model_state_dict(self.model, state)
        if "optimizer" in contents:
            state = get_optimizer_state_dict(self.model, self.optimizer)
            self._dcp_load({"optimizer": state}, os.path.join(local_path, OPTIMIZER_DIR))
            set_optimizer_state_dict(self.model, self.optimizer, state)
            self.optimizer.zero_grad(set_to_none=True)  # the template's zero grads are not training state
        if "extra" in contents:
            self._load_extra(local_path, int(manifest["world_size"]), optimizer_loaded="optimizer" in contents)
        self.barrier()

    def _contents_to_load(self, manifest: dict[str, Any], local_path: str) -> list[str]:
        saved = set(manifest["contents"])
        wanted = [c for c in self.load_contents if c != "hf_model"]  # the HF copy is for people, not for resuming
        missing = [c for c in wanted if c not in saved and not (c == "optimizer" and manifest.get("optimizer_requested"))]
        if missing:
            raise ValueError(f"checkpoint.load_contents asks for {missing} but {local_path} was saved with "
                             f"{sorted(saved)}; drop them from checkpoint.load_contents")
        # "optimizer" requested and saved without state (it had never stepped): the fresh optimizer is that state
        return [c for c in wanted if c in saved]

    def _verify(self, local_path: str, manifest: dict[str, Any], contents: list[str]) -> None:
        """Check sizes and hashes of the files about to be read; ranks split the hashing, all see every problem."""
        prefixes = {"model": MODEL_DIR + "/", "optimizer": OPTIMIZER_DIR + "/", "extra": "extra_state_"}
        files = sorted(f for f in manifest["files"] if any(f.startswith(prefixes[c]) for c in contents))
        mine = files[self.rank::self.world_size]
        problems = [p for p in (check_file(local_path, f, manifest["files"][f]) for f in mine) if p]
        raise_if_problems([p for part in self.all_gather_object(problems) for p in part])

    def _dcp_load(self, state: dict[str, Any], path: str) -> None:
        try:
            dcp.load(state, checkpoint_id=path)
        except Exception as err:  # noqa: BLE001 - re-raised with the folder that failed to load
            raise RuntimeError(f"could not load the checkpoint in {path} into {unwrapped_model_class(self.hf_model).__name__}"
                               f": {err}. Was it saved from a different model (actor vs critic, other config)?") from err

    def _load_extra(self, local_path: str, saved_world: int, optimizer_loaded: bool) -> None:
        same_world = saved_world == self.world_size
        name = extra_state_name(saved_world, self.rank if same_world else self.rank % saved_world)
        extra = torch.load(os.path.join(local_path, name), weights_only=True)
        if self.lr_scheduler is not None and extra.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
            if not optimizer_loaded and self.optimizer is not None:
                for group, lr in zip(self.optimizer.param_groups, self.lr_scheduler.get_last_lr()):
                    group["lr"] = lr
        if self.step_state is not None:
            if "step_state" in extra:  # the same on every rank, so any rank's file serves a new world size
                self.step_state.load_step_state(extra["step_state"])
            elif self.rank == 0:
                logger.warning("%s predates saved update counters: they restart at 0, so with shuffle=true the "
                               "mini-batch order differs from an uninterrupted run", local_path)
        if same_world:
            set_rng_state(extra["rng"])  # last, so nothing above draws from the restored streams
        elif self.rank == 0:
            logger.warning("%s was saved by %d ranks and is loaded by %d: weights and optimizer are resharded, but "
                           "the RNG streams start fresh, so sampling will differ from an uninterrupted run",
                           local_path, saved_world, self.world_size)
