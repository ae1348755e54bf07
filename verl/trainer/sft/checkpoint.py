"""SFT checkpoints: `<default_local_dir>/global_step_N/`, a plain HF model folder plus the state to resume.

    global_step_N/
      config.json, generation_config.json, model.safetensors, tokenizer files   <- main_ppo loads this folder
      preprocessor_config.json, chat_template.json, ...                          <- vision-language models
      lora_adapter/adapter_config.json, adapter_model.safetensors               <- LoRA runs (peft format)
      trainer_state.pt   global step, epoch, data position, LR schedule, optimizer (full, unsharded)

A LoRA run's model.safetensors holds the merged weights (W + alpha/r * B @ A), so the folder is a full model.
Weights and optimizer state are gathered unsharded, so a run may resume on a different number of ranks.
Only rank 0 writes; everything goes to a temporary folder first and is renamed into place, so a crash leaves
either the old checkpoint or the new one, never half of one. `latest_checkpointed_iteration.txt` (upstream's
name) records the newest step.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)

from verl.models.lora import ADAPTER_DIR, ADAPTER_WEIGHTS, merge_lora_weights, save_lora_adapter

__all__ = ["ADAPTER_DIR", "ADAPTER_WEIGHTS", "merge_lora_weights", "SFTCheckpointer"]

if TYPE_CHECKING:
    from verl.trainer.config.sft import SFTTrainerSection

STATE_FILE = "trainer_state.pt"
LATEST_FILE = "latest_checkpointed_iteration.txt"
_STEP_DIR = re.compile(r"^global_step_(\d+)$")
# a vision-language model folder's processor files: without them main_ppo / load_processor would see a text model
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json",
                   "chat_template.json", "chat_template.jinja")


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def step_dir(root: str, step: int) -> str:
    return os.path.join(root, f"global_step_{step}")


def list_checkpoints(root: str) -> list[tuple[int, str]]:
    """(step, folder) of every finished checkpoint under root, oldest first."""
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        match = _STEP_DIR.match(name)
        if match and os.path.isfile(os.path.join(root, name, STATE_FILE)):
            found.append((int(match.group(1)), os.path.join(root, name)))
    return sorted(found)


def find_latest_checkpoint(root: str) -> str | None:
    root = os.path.abspath(os.path.expanduser(root))
    latest = os.path.join(root, LATEST_FILE)
    if os.path.isfile(latest):
        with open(latest) as f:
            text = f.read().strip()
        if text.isdigit() and os.path.isfile(os.path.join(step_dir(root, int(text)), STATE_FILE)):
            return step_dir(root, int(text))
    found = list_checkpoints(root)
    return found[-1][1] if found else None


def resolve_resume_dir(trainer_config: SFTTrainerSection) -> str | None:
    """The checkpoint folder to resume from, per trainer.resume_mode (auto | disable | resume_path)."""
    mode = trainer_config.resume_mode
    if mode == "disable":
        return None
    if mode == "resume_path":
        path = os.path.abspath(os.path.expanduser(str(trainer_config.resume_from_path)))
        if not os.path.isfile(os.path.join(path, STATE_FILE)):
            raise FileNotFoundError(f"trainer.resume_from_path={trainer_config.resume_from_path!r} has no {STATE_FILE}; "
                                    "point it at a global_step_N folder written by the SFT trainer")
        return path
    return find_latest_checkpoint(trainer_config.default_local_dir)


# ---- weights ----------------------------------------------------------------------------------------------------


def gather_full_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Unsharded CPU copy of every weight on rank 0 ({} elsewhere). Every rank must call it (it all-gathers)."""
    return get_model_state_dict(module, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _copy_processor_files(source: str | None, folder: str) -> None:
    if source is None:
        return
    for name in PROCESSOR_FILES:
        path, target = os.path.join(source, name), os.path.join(folder, name)
        # a chat template the tokenizer just saved is the run's (data.chat_template may have replaced it): keep it
        if os.path.isfile(path) and not os.path.exists(target):
            shutil.copy2(path, target)


def _write_hf_folder(folder: str, hf_model: torch.nn.Module, state: dict[str, torch.Tensor], tokenizer) -> None:
    # the training copy runs with use_cache off (gradient checkpointing); a saved model is for inference
    config = hf_model.config
    use_cache = getattr(config, "use_cache", None)
    config.use_cache = True
    try:
        hf_model.save_pretrained(folder, state_dict=state, safe_serialization=True)
    finally:
        config.use_cache = use_cache
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)


def _write_adapter(folder: str, module: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    save_lora_adapter(os.path.join(folder, ADAPTER_DIR), module, state)


# ---- save / load ------------------------------------------------------------------------------------------------


class SFTCheckpointer:
    """Saves and restores the SFT trainer's checkpoints; every rank calls save/load (they are collective).
    ``processor_dir``: the model folder whose processor files (PROCESSOR_FILES) every checkpoint copies, for a
    vision-language model."""

    def __init__(self, root: str, tokenizer, save_contents=("model", "optimizer", "extra"),
                 load_contents=("model", "optimizer", "extra"), max_ckpt_to_keep: int | None = None,
                 processor_dir: str | None = None) -> None:
        self.root = os.path.abspath(os.path.expanduser(root))
        self.tokenizer = tokenizer
        self.processor_dir = processor_dir
        self.save_contents = set(save_contents)
        self.load_contents = set(load_contents)
        self.max_ckpt_to_keep = max_ckpt_to_keep

    def save(self, module: torch.nn.Module, hf_model: torch.nn.Module, optimizer: torch.optim.Optimizer,
             lr_scheduler, extra: dict[str, Any], step: int, lora_scaling: float | None = None) -> str:
        full = gather_full_state(module)
        optim_state = None
        if "optimizer" in self.save_contents:
            optim_state = get_optimizer_state_dict(module, optimizer,
                                                   options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        final = step_dir(self.root, step)
        if _rank() == 0:
            os.makedirs(self.root, exist_ok=True)
            tmp = os.path.join(self.root, f".tmp_global_step_{step}_{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            hf_state = merge_lora_weights(full, lora_scaling) if lora_scaling is not None else full
            _write_hf_folder(tmp, hf_model, hf_state, self.tokenizer)
            _copy_processor_files(self.processor_dir, tmp)
            if lora_scaling is not None:
                _write_adapter(tmp, module, full)
            state: dict[str, Any] = {"global_step": step}
            if "extra" in self.save_contents:
                state.update(extra)
                state["lr_scheduler"] = lr_scheduler.state_dict()
            if optim_state is not None:
                state["optimizer"] = optim_state
            torch.save(state, os.path.join(tmp, STATE_FILE))
            _replace_folder(tmp, final)
            _write_text_atomically(os.path.join(self.root, LATEST_FILE), str(step))
            self._prune()
        _barrier()
        return final

    def _prune(self) -> None:
        keep = self.max_ckpt_to_keep
        if not keep or keep <= 0:
            return
        for _, folder in list_checkpoints(self.root)[:-keep]:
            shutil.rmtree(folder, ignore_errors=True)

    def load(self, folder: str, module: torch.nn.Module, optimizer: torch.optim.Optimizer,
             lr_scheduler) -> dict[str, Any]:
        """Restore optimizer and schedule (the weights were loaded with the model); returns trainer_state.pt's
        other entries (global_step, epoch, dataloader position)."""
        state = torch.load(os.path.join(folder, STATE_FILE), map_location="cpu", weights_only=True)
        if "optimizer" in self.load_contents:
            if "optimizer" not in state:
                raise KeyError(f"{folder}/{STATE_FILE} holds no optimizer state (saved without 'optimizer' in "
                               "trainer.checkpoint.save_contents); drop 'optimizer' from trainer.checkpoint.load_contents")
            set_optimizer_state_dict(module, optimizer, optim_state_dict=state["optimizer"] if _rank() == 0 else {},
                                     options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
        if "extra" in self.load_contents and "lr_scheduler" in state:
            lr_scheduler.load_state_dict(state["lr_scheduler"])
        return {k: v for k, v in state.items() if k not in ("optimizer", "lr_scheduler")}


def _replace_folder(tmp: str, final: str) -> None:
    old = None
    if os.path.exists(final):
        old = f"{final}.old_{os.getpid()}"
        os.rename(final, old)
    os.rename(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_text_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp_{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
