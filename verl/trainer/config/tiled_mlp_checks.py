"""``model.tiled_mlp`` checked before Ray: the model must have a dense MLP to tile (verl.models.tiled_mlp).

A mixture of experts whose experts are one fused module (transformers' Qwen3-MoE, Mixtral, ...) has none. Whether a
model has one depends on the installed transformers' class for it, so the class is built from the folder's
config on the meta device (no weights, no memory) and asked, as the loader would find out after Ray started.
"""

from __future__ import annotations

import os

from verl.trainer.config.ppo_trainer import PPOTrainerConfig

__all__ = ["check_tiled_mlp"]


def _has_dense_mlp(model_path: str, trust_remote_code: bool) -> bool | None:
    """Whether the model in `model_path` has an MLP tiling applies to; None when that cannot be told here (no
    readable config, an architecture transformers cannot build): the loader names the problem then."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl.models.tiled_mlp import tiled_mlp_modules

    folder = os.path.expanduser(model_path)
    if not os.path.isfile(os.path.join(folder, "config.json")):
        return None
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    except Exception:  # noqa: BLE001 - unbuildable here: the worker's loader reports it with its own message
        return None
    return bool(tiled_mlp_modules(model))


def check_tiled_mlp(cfg: PPOTrainerConfig) -> list[str]:
    problems = []
    arr = cfg.actor_rollout_ref
    roles = [("actor_rollout_ref.model", arr.model.tiled_mlp, arr.model.path, arr.model.trust_remote_code)]
    if cfg.use_critic:
        critic = cfg.critic.model
        roles.append(("critic.model", critic.tiled_mlp, critic.path or arr.model.path, critic.trust_remote_code))
    for key, tiled, path, trust in roles:
        if not tiled.enabled or not path:  # null path: the bundled default model, a dense one
            continue
        if _has_dense_mlp(path, trust) is False:
            problems.append(f"{key}.tiled_mlp.enabled=true, but the model at {key}.path={path} has no dense MLP "
                            "(gate_proj / up_proj / down_proj modules) to tile: its experts are one fused module; "
                            f"set {key}.tiled_mlp.enabled=false.")
    return problems
