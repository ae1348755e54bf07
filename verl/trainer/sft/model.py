"""Building the SFT model: the HF causal LM (or a resumed checkpoint), an optional LoRA adapter, FSDP2."""

from __future__ import annotations

import importlib
import os

import torch

from verl.models import lora
from verl.models.loader import load_causal_lm, resolve_model_path
from verl.models.lora import ADAPTER_DIR, ADAPTER_WEIGHTS
from verl.trainer.config.sft import SFTModelConfig, SFTTrainerConfig
from verl.workers.config import HFModelConfig
from verl.workers.fsdp_utils import apply_fsdp2, to_torch_dtype


def base_model_path(config: SFTTrainerConfig) -> str:
    return resolve_model_path(config.model.partial_pretrain, "model.partial_pretrain")


def lora_enabled(config: SFTTrainerConfig) -> bool:
    return config.model.lora_rank > 0


def add_lora(module: torch.nn.Module, model_config: SFTModelConfig) -> torch.nn.Module:
    """Wrap in a peft LoRA model (verl.models.lora, shared with the RL workers): base weights frozen."""
    return lora.add_lora(module, model_config.lora_rank, model_config.lora_alpha, model_config.target_modules,
                         key="model")


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
    load_config = HFModelConfig(path=path, trust_remote_code=model_config.trust_remote_code,
                              override_config=dict(model_config.override_config),
                              enable_gradient_checkpointing=model_config.enable_gradient_checkpointing,
                              gradient_checkpointing_policy=model_config.gradient_checkpointing_policy)
    module, _ = load_causal_lm(load_config, "model (model.partial_pretrain)", dtype=dtype)
    if lora:
        module = add_lora(module, model_config)
        if resume_dir:
            _load_adapter(module, resume_dir)
    return apply_fsdp2(module, fsdp_config.to_engine(), device_mesh)


def hf_module(module: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a (possibly peft-wrapped) module."""
    return lora.hf_module(module)
