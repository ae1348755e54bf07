"""Writing a HF folder (config, generation config, tokenizer, optionally safetensors weights) for a trained module.

FSDP2's `fully_shard` swaps the module's class for a generated `FSDP<Name>` subclass, which HF would record as the
architecture; the real class is found in its MRO so `from_pretrained` builds the right model.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import torch

HF_SUBDIR = "huggingface"


def unwrapped_model_class(module: torch.nn.Module) -> type:
    from torch.distributed.fsdp import FSDPModule

    for cls in type(module).__mro__:
        if issubclass(cls, torch.nn.Module) and not issubclass(cls, FSDPModule):
            return cls
    raise TypeError(f"cannot find the model class of {type(module).__name__}")


def hf_config_of(module: torch.nn.Module):
    config = getattr(module, "config", None)
    if config is None or not hasattr(config, "save_pretrained"):
        raise TypeError(f"{unwrapped_model_class(module).__name__} has no HF `config`; only HF models can be "
                        "checkpointed with their config")
    config = copy.deepcopy(config)
    config.architectures = [unwrapped_model_class(module).__name__]
    return config


def save_hf_metadata(module: torch.nn.Module, processing_class: Any, out_dir: str) -> None:
    """config.json (+ generation_config.json) and the tokenizer files: what a merged HF folder needs besides weights."""
    os.makedirs(out_dir, exist_ok=True)
    config = hf_config_of(module)
    config.save_pretrained(out_dir)
    generation_config = getattr(module, "generation_config", None)
    if generation_config is not None:
        generation_config.save_pretrained(out_dir)
    if processing_class is not None:
        processing_class.save_pretrained(out_dir)


def save_hf_weights(model_class: type, config, state_dict: dict[str, torch.Tensor], out_dir: str) -> None:
    """Safetensors weights from a full (unsharded) state dict, without allocating a second copy of the model."""
    with torch.device("meta"):
        shell = model_class._from_config(config)
    # save_pretrained drops tied duplicates from the dict it is given: hand it a copy
    shell.save_pretrained(out_dir, state_dict=dict(state_dict))
