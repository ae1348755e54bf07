"""Building the SFT model: the HF causal LM (or a resumed checkpoint), an optional LoRA adapter, FSDP2."""

from __future__ import annotations

import importlib
import os

import torch

from verl.models.loader import load_causal_lm, resolve_model_path
from verl.trainer.config.actor import ModelConfig
from verl.trainer.config.sft import SFTModelConfig, SFTTrainerConfig
from verl.trainer.sft.checkpoint import ADAPTER_DIR, ADAPTER_WEIGHTS
from verl.workers.fsdp_utils import apply_fsdp2, to_torch_dtype


def base_model_path(config: SFTTrainerConfig) -> str:
    return resolve_model_path(config.model.partial_pretrain, "model.partial_pretrain")


def lora_enabled(config: SFTTrainerConfig) -> bool:
    return config.model.lora_rank > 0


def add_lora(module: torch.nn.Module, model_config: SFTModelConfig) -> torch.nn.Module:
    """Wrap in a peft LoRA model: base weights frozen, only the adapter matrices train."""
    from peft import LoraConfig, TaskType, get_peft_model

    target = model_config.target_modules
    lora_config = LoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=model_config.lora_rank,
        lora_alpha=model_config.lora_alpha,
        target_modules=list(target) if isinstance(target, list) else target,
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


def build_sft_module(config: SFTTrainerConfig, device_mesh, resume_dir: str | None = None) -> torch.nn.Module:
    """The FSDP2-sharded model. A full-model resume loads the checkpoint's HF weights; a LoRA resume loads the
    base model and then the saved adapter."""
    model_config = config.model
    if model_config.external_lib:
        importlib.import_module(model_config.external_lib)
    fsdp_config = model_config.fsdp_config
    dtype = to_torch_dtype(fsdp_config.model_dtype, "model.fsdp_config.model_dtype")
    lora = lora_enabled(config)
    path = resume_dir if (resume_dir and not lora) else base_model_path(config)
    load_config = ModelConfig(path=path, trust_remote_code=model_config.trust_remote_code,
                              override_config=dict(model_config.override_config),
                              enable_gradient_checkpointing=model_config.enable_gradient_checkpointing)
    module, _ = load_causal_lm(load_config, "model (model.partial_pretrain)", dtype=dtype)
    if lora:
        module = add_lora(module, model_config)
        if resume_dir:
            _load_adapter(module, resume_dir)
    return apply_fsdp2(module, fsdp_config.to_engine(), device_mesh)


def hf_module(module: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a (possibly peft-wrapped) module: the one whose config and save_pretrained
    describe the checkpoint."""
    get_base = getattr(module, "get_base_model", None)
    return get_base() if callable(get_base) and hasattr(module, "peft_config") else module
