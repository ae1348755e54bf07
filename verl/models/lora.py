"""LoRA adapters (peft) on HF models: wrapping, starting from a saved adapter, and turning adapter weights back
into plain HF weights. One implementation for the SFT trainer, the RL actor and critic, the vLLM weight sync,
checkpoints and the model merger.

Merging is done on full (gathered) tensors, never in place on the training module: FSDP2 holds sharded
DTensors, and peft's in-place ``merge_adapter`` would have to unshard, add and re-shard every layer, and
leave the training weights rounded by the round trip. The merged weight is ``W + scaling * B @ A`` computed in
fp32, under the base model's parameter name.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

ADAPTER_DIR = "lora_adapter"  # the peft folder inside a checkpoint (SFT step folder, RL role folder)
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
PEFT_PREFIX = "base_model.model."

# peft parameter names: <layer>.lora_A.<adapter>.weight, <layer>.base_layer.<param>,
# <head>.modules_to_save.<adapter>.<param> (a trainable copy of a whole module) and <head>.original_module.<param>
_LORA_WEIGHT = re.compile(r"^(.*)\.lora_([AB])\.[^.]+\.weight$")
_SAVED_MODULE = re.compile(r"\.modules_to_save\.[^.]+\.")


def is_peft_model(module: torch.nn.Module) -> bool:
    return hasattr(module, "peft_config") and callable(getattr(module, "get_base_model", None))


def hf_module(module: torch.nn.Module) -> torch.nn.Module:
    """The transformers model inside a (possibly peft-wrapped) module: the one whose config, class and
    save_pretrained describe the checkpoint."""
    return module.get_base_model() if is_peft_model(module) else module


def _normalise_targets(value: str | list[str] | tuple[str, ...] | None, key: str) -> str | list[str] | None:
    if value is None or isinstance(value, str):
        return value
    names = [str(v) for v in value]
    if not names or any(not n for n in names):
        raise ValueError(f"{key}={value!r}: give 'all-linear' or a non-empty list of module names (q_proj, ...)")
    return names


def add_lora(module: torch.nn.Module, rank: int, alpha: float, target_modules: str | list[str] = "all-linear",
             exclude_modules: str | list[str] | None = None, modules_to_save: list[str] | None = None,
             task_type: str = "CAUSAL_LM", key: str = "model") -> torch.nn.Module:
    """Wrap ``module`` in a fresh peft LoRA model: base weights frozen, only the adapter matrices (and
    ``modules_to_save``, e.g. a value head) train. ``key`` names the config section in errors."""
    from peft import LoraConfig, get_peft_model

    if rank <= 0 or alpha <= 0:
        raise ValueError(f"{key}.lora_rank={rank} and {key}.lora_alpha={alpha} must both be > 0 to add LoRA")
    targets = _normalise_targets(target_modules, f"{key}.target_modules")
    _refuse_tied_head(module, targets, key)
    config = LoraConfig(task_type=task_type, r=int(rank), lora_alpha=alpha, target_modules=targets,
                        exclude_modules=_normalise_targets(exclude_modules, f"{key}.exclude_modules"),
                        modules_to_save=modules_to_save, lora_dropout=0.0, bias="none")
    try:
        wrapped = get_peft_model(module, config)
    except ValueError as err:  # peft: "Target modules {...} not found in the base model"
        raise ValueError(f"{key}.target_modules={target_modules!r} / {key}.exclude_modules={exclude_modules!r} "
                         f"select no layer LoRA can adapt in {type(module).__name__}: {err}") from err
    _keep_selective_checkpointing(wrapped.get_base_model())
    return wrapped


def _keep_selective_checkpointing(module: torch.nn.Module) -> None:
    """The recompute functions of selective checkpointing fuse a plain down_proj; with an adapter there, the same
    policy runs as torch's selective-checkpointing mode instead (verl.models.checkpoint_policy)."""
    from verl.models.checkpoint_policy import applied_checkpointing, apply_gradient_checkpointing

    if applied_checkpointing(module) == "selective":
        apply_gradient_checkpointing(module, "selective")


def _refuse_tied_head(module: torch.nn.Module, targets: str | list[str] | None, key: str) -> None:
    """An adapter on a head tied to the embeddings would change both through one merged matrix, which the
    inference engines (tied again on load) cannot represent; peft's all-linear never picks the head."""
    tied = bool(getattr(getattr(module, "config", None), "tie_word_embeddings", False))
    if tied and isinstance(targets, list) and "lm_head" in targets:
        raise ValueError(f"{key}.target_modules names lm_head, which this model ties to its input embeddings; "
                         "leave it out (all-linear already does)")


def check_adapter_folder(path: str, key: str) -> str:
    """The absolute adapter folder, after checking it holds a peft LoRA adapter (config + safetensors)."""
    folder = os.path.abspath(os.path.expanduser(str(path)))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"{key}={path!r}: no such folder; point it at a saved peft adapter folder "
                                f"({ADAPTER_CONFIG} + {ADAPTER_WEIGHTS}), e.g. <ckpt>/global_step_N/actor/{ADAPTER_DIR}")
    missing = [f for f in (ADAPTER_CONFIG, ADAPTER_WEIGHTS) if not os.path.isfile(os.path.join(folder, f))]
    if missing:
        raise FileNotFoundError(f"{key}={path!r} lacks {missing}; a peft adapter folder holds {ADAPTER_CONFIG} "
                                f"and {ADAPTER_WEIGHTS} (save_pretrained of a peft model writes both)")
    with open(os.path.join(folder, ADAPTER_CONFIG), encoding="utf-8") as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as err:
            raise ValueError(f"{key}: {folder}/{ADAPTER_CONFIG} is not valid JSON ({err})") from None
    if str(config.get("peft_type", "")).upper() != "LORA":
        raise ValueError(f"{key}: {folder}/{ADAPTER_CONFIG} has peft_type={config.get('peft_type')!r}; only LoRA "
                         "adapters are supported")
    return folder


def load_lora_adapter(module: torch.nn.Module, path: str, rank: int, alpha: float, key: str = "model",
                      is_trainable: bool = True) -> torch.nn.Module:
    """Wrap ``module`` with the adapter saved in ``path`` (its own target modules); its rank and alpha must be
    the configured ones, so the run trains what its config says."""
    from peft import PeftModel

    folder = check_adapter_folder(path, f"{key}.lora_adapter_path")
    saved = read_adapter_config(folder)
    if int(saved.get("r", -1)) != int(rank) or float(saved.get("lora_alpha", -1)) != float(alpha):
        raise ValueError(f"{key}.lora_adapter_path={path!r} holds an adapter with r={saved.get('r')}, lora_alpha="
                         f"{saved.get('lora_alpha')}, but {key}.lora_rank={rank}, {key}.lora_alpha={alpha}; set them "
                         "to the adapter's values")
    try:
        return PeftModel.from_pretrained(module, folder, is_trainable=is_trainable)
    except Exception as err:  # noqa: BLE001 - re-raised naming the key and the folder
        raise ValueError(f"{key}.lora_adapter_path={path!r}: the adapter does not fit {type(module).__name__} "
                         f"({type(err).__name__}: {err}); was it saved from another base model?") from err


def adapter_lacks_modules(saved: Mapping[str, Any], modules_to_save: list[str] | None, key: str,
                          path: str) -> str | None:
    """The refusal of an adapter (its adapter_config.json ``saved``) that holds no trained copy of a module the
    role trains in full (``modules_to_save``: the critic's value head), or None."""
    missing = sorted(set(modules_to_save or []) - set(saved.get("modules_to_save") or []))
    if not missing:
        return None
    return (f"{key}={path!r} holds no trained copy of {missing} (the adapter's modules_to_save): it was not saved "
            "from this role (a policy's adapter has no value head). Start from a fresh adapter (remove the key) or "
            "give an adapter saved by this role")


def read_adapter_config(folder: str) -> dict[str, Any]:
    with open(os.path.join(folder, ADAPTER_CONFIG), encoding="utf-8") as f:
        return json.load(f)


def scaling_from_adapter_config(config: Mapping[str, Any]) -> float:
    """The factor peft multiplies B @ A by: alpha / r, or alpha / sqrt(r) with rsLoRA."""
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise NotImplementedError("adapters with per-layer rank_pattern/alpha_pattern are not supported")
    rank, alpha = int(config["r"]), float(config["lora_alpha"])
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def lora_scalings(module: torch.nn.Module, adapter: str = "default") -> dict[str, float]:
    """{layer name: scaling} of every LoRA layer of a peft module (names as in its named_parameters)."""
    from peft.tuners.lora import LoraLayer

    return {name: float(m.scaling[adapter]) for name, m in module.named_modules()
            if isinstance(m, LoraLayer) and adapter in m.scaling}


def _merge(weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: float) -> torch.Tensor:
    return (weight.float() + scaling * (b.float() @ a.float())).to(weight.dtype)


def merged_named_weights(named: Iterable[tuple[str, torch.Tensor]], scaling: float | Mapping[str, float],
                         dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """A peft model's (name, full tensor) stream -> the merged plain HF model's, lazily: a base weight waits only
    for its own lora_A/lora_B, which follow it in parameter order. peft's prefixes, ``.base_layer`` and
    ``.modules_to_save.<adapter>`` leave the names; adapter matrices and the frozen ``original_module`` copies
    are dropped. ``scaling``: one factor, or per layer (lora_scalings). ``dtype``: cast every output to it."""
    waiting: dict[str, dict[str, Any]] = {}

    def out(name: str, tensor: torch.Tensor) -> tuple[str, torch.Tensor]:
        name = name[len(PEFT_PREFIX):] if name.startswith(PEFT_PREFIX) else name
        return name, tensor.to(dtype) if dtype is not None else tensor

    def ready(layer: str) -> tuple[str, torch.Tensor] | None:
        parts = waiting[layer]
        if not {"W", "A", "B"} <= set(parts):
            return None
        del waiting[layer]
        factor = scaling if isinstance(scaling, (int, float)) else scaling.get(layer)
        if factor is None:
            raise KeyError(f"no LoRA scaling known for layer {layer!r}")
        return out(f"{layer}.weight", _merge(parts["W"], parts["A"], parts["B"], float(factor)))

    for name, tensor in named:
        match = _LORA_WEIGHT.match(name)
        if match is not None:
            layer = match.group(1)
            waiting.setdefault(layer, {})[match.group(2)] = tensor
        elif ".lora_" in name:
            raise NotImplementedError(f"cannot merge LoRA parameter {name!r}: only Linear adapters (lora_A/lora_B) "
                                      "are supported; limit target_modules to linear layers")
        elif ".original_module." in name:
            continue
        elif ".base_layer." in name:
            layer, _, param = name.rpartition(".base_layer.")
            if param != "weight":
                yield out(f"{layer}.{param}", tensor)
                continue
            waiting.setdefault(layer, {})["W"] = tensor
        else:
            yield out(_SAVED_MODULE.sub(".", name), tensor)
            continue
        merged = ready(layer)
        if merged is not None:
            yield merged
    if waiting:
        layer, parts = next(iter(waiting.items()))
        raise KeyError(f"{layer!r} has {sorted(parts)} of its base weight and lora_A/lora_B; the state is incomplete")


def merge_lora_weights(state: Mapping[str, torch.Tensor], scaling: float | Mapping[str, float]) -> dict[str, torch.Tensor]:
    """A peft LoRA model's full state dict -> the plain HF state dict of the merged model."""
    return dict(merged_named_weights(state.items(), scaling))


def adapter_state(module: torch.nn.Module, full_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The adapter's own tensors (peft's file layout) out of the peft module's full state dict."""
    from peft.utils import get_peft_model_state_dict

    return {k: v.contiguous() for k, v in get_peft_model_state_dict(module, state_dict=dict(full_state)).items()}


def save_lora_adapter(folder: str, module: torch.nn.Module, full_state: Mapping[str, torch.Tensor]) -> str:
    """Write a peft adapter folder (adapter_config.json + adapter_model.safetensors) that
    ``PeftModel.from_pretrained`` and ``lora_adapter_path`` load; returns the folder."""
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    save_file(adapter_state(module, full_state), os.path.join(folder, ADAPTER_WEIGHTS))
    module.peft_config["default"].save_pretrained(folder)
    return folder


class PeftAdapterIO:
    """What a checkpoint needs from a peft module (verl.checkpoint.fsdp_checkpoint_manager.AdapterIO): the HF
    model inside, the merged HF state and the adapter folder."""

    def __init__(self, module: torch.nn.Module) -> None:
        if not is_peft_model(module):
            raise TypeError(f"{type(module).__name__} is not a peft model")
        self.module = module

    @property
    def hf_model(self) -> torch.nn.Module:
        return hf_module(self.module)

    def merged_state(self, full_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return merge_lora_weights(full_state, lora_scalings(self.module))

    def save_adapter(self, folder: str, full_state: Mapping[str, torch.Tensor]) -> None:
        save_lora_adapter(folder, self.module, full_state)


def lora_from_model_config(module: torch.nn.Module, model_config: Any, key: str,
                           modules_to_save: list[str] | None = None) -> torch.nn.Module:
    """``module`` with the LoRA a worker's model section asks for (HFModelConfig / FSDPCriticModelCfg: lora_rank,
    lora_alpha, target_modules, exclude_modules, lora_adapter_path); unchanged at rank 0. An adapter loaded for a
    section with ``modules_to_save`` (the critic's value head) must hold them.
    Called before FSDP wraps the module, so the adapter's matrices are sharded with the layer they adapt."""
    rank = int(model_config.lora_rank)
    if rank <= 0:
        return module
    adapter_path = getattr(model_config, "lora_adapter_path", None)
    if adapter_path:
        problem = adapter_lacks_modules(read_adapter_config(check_adapter_folder(adapter_path, f"{key}.lora_adapter_path")),
                                        modules_to_save, f"{key}.lora_adapter_path", adapter_path)
        if problem:  # e.g. a policy's adapter given to the critic: its value head would stay frozen
            raise ValueError(problem)
        return load_lora_adapter(module, adapter_path, rank, model_config.lora_alpha, key=key)
    return add_lora(module, rank, model_config.lora_alpha, model_config.target_modules,
                    exclude_modules=getattr(model_config, "exclude_modules", None), modules_to_save=modules_to_save,
                    task_type="CAUSAL_LM" if modules_to_save is None else None, key=key)


def adapter_io(module: torch.nn.Module) -> PeftAdapterIO | None:
    """The checkpoint hooks of a peft module; None for a plain model."""
    return PeftAdapterIO(module) if is_peft_model(module) else None
