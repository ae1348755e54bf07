"""Vision-language model parts: which submodule is the vision tower, and freezing it (actor.freeze_vision_tower)."""

from __future__ import annotations

import torch

__all__ = ["vision_tower", "freeze_vision_tower", "is_vision_language_config"]


def is_vision_language_config(config) -> bool:
    """Whether an HF config is a vision-language model's (it has a vision sub-config)."""
    return getattr(config, "vision_config", None) is not None


def vision_tower(model: torch.nn.Module) -> torch.nn.Module | None:
    """The vision encoder (with its merger/projector) of a Qwen2-VL / Qwen2.5-VL style model, peft-wrapped too."""
    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) and hasattr(model, "peft_config") else model
    for holder in (base, getattr(base, "model", None)):
        tower = getattr(holder, "visual", None) if holder is not None else None
        if isinstance(tower, torch.nn.Module):
            return tower
    return None


def freeze_vision_tower(model: torch.nn.Module) -> int:
    """Stop gradients into the vision tower; returns the number of parameters frozen. Raises for a model without
    one, naming the key."""
    tower = vision_tower(model)
    if tower is None:
        raise ValueError(f"actor_rollout_ref.actor.freeze_vision_tower=true, but {type(model).__name__} has no vision "
                         "tower; it applies to vision-language models (Qwen2-VL / Qwen2.5-VL)")
    count = 0
    for parameter in tower.parameters():
        parameter.requires_grad_(False)
        count += parameter.numel()
    return count
