"""Building the SFT model: the HF causal LM (or a resumed checkpoint), an optional LoRA adapter, FSDP2."""

from __future__ import annotations

import importlib
import os
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig, OmegaConf

from verl.models.loader import load_causal_lm, resolve_model_path
from verl.trainer.sft.checkpoint import ADAPTER_DIR, ADAPTER_WEIGHTS
from verl.workers.fsdp_utils import apply_fsdp2, to_torch_dtype


def base_model_path(config: DictConfig) -> str:
    return resolve_model_path(config.model.get("partial_pretrain"), "model.partial_pretrain")


def _plain(value: Any) -> dict:
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig) else dict(value or {})


def lora_enabled(config: DictConfig) -> bool:
    return int(config.model.get("lora_rank", 0) or 0) > 0


def _target_modules(value: Any) -> str | list[str]:
    if isinstance(value, ListConfig | list | tuple):
        return [str(v) for v in value]
    return str(value)


def add_lora(module: torch.nn.Module, model_config: DictConfig) -> torch.nn.Module:
    """Wrap in a peft LoRA model: base weights frozen, only the adapter matrices train."""
    from peft import LoraConfig, TaskType, get_peft_model

    lora_config = LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=int(model_config.lora_rank),
        lora_alpha=float(model_config.get("lora_alpha", 16)),
        target_modules=_target_modules(model_config.get("target_modules", "all-linear")),
        lora_dropout=0.0,
        bias="none",
    )
    return get_peft_model(module, lora_config)


def _load_adapter(module: torch.nn.Module, checkpoint_dir: str) -> None:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = os.path.join(checkpoint_dir, ADAPTER_DIR, ADAPTER_WEIGHTS)
    if not os.path.exists(path):
        raise FileNotFoundError(f"resuming a LoRA run from {checkpoint_dir!r}, but it has no {ADAPTER_DIR}/"
                                f"{ADAPTER_WEIGHTS}; it was not written by a LoRA run (model.lora_rank > 0)")
    result = set_peft_model_state_dict(module, load_file(path))
    unexpected = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
    if unexpected:
        raise RuntimeError(f"{path}: adapter weights {unexpected[:3]} do not match this model's LoRA layers "
                           "(model.lora_rank / model.target_modules changed since the checkpoint?)")


def build_sft_module(config: DictConfig, device_mesh, resume_dir: str | None = None) -> torch.nn.Module:
    """The FSDP2-sharded model. A full-model resume loads the checkpoint's HF weights; a LoRA resume loads the
    base model and then the saved adapter."""
    model_config = config.model
    if model_config.get("external_lib"):
        importlib.import_module(str(model_config.external_lib))
    fsdp_config = model_config.get("fsdp_config") or {}
    dtype = to_torch_dtype(fsdp_config.get("model_dtype", "fp32"), "model.fsdp_config.model_dtype")
    lora = lora_enabled(config)
    path = resume_dir if (resume_dir and not lora) else base_model_path(config)
    load_config = OmegaConf.create({
        "path": path,
        "trust_remote_code": bool(model_config.get("trust_remote_code", False)),
        "override_config": _plain(model_config.get("override_config")),
        "enable_gradient_checkpointing": bool(model_config.get("enable_gradient_checkpointing", False)),
    })
    module, _ = load_causal_lm(load_config, "model (model.partial_pretrain)", dtype=dtype)
    if lora:
        module = add_lora(module, model_config)
        if resume_dir:
            _load_adapter(module, resume_dir)
    return apply_fsdp2(module, fsdp_config, device_mesh)


def hf_module(module: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a (possibly peft-wrapped) module: the one whose config and save_pretrained
    describe the checkpoint."""
    get_base = getattr(module, "get_base_model", None)
    return get_base() if callable(get_base) and hasattr(module, "peft_config") else module
