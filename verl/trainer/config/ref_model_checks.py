"""Checks of `actor_rollout_ref.ref.model` (upstream's reference-model section), run before Ray starts.

Null: the reference policy is the actor's model. A section `{path: folder}` loads a different reference model from
that folder in the reference worker (verl.workers.fsdp_workers), as upstream's FSDP worker does; upstream reads only
its `path`, so any other key is refused here rather than ignored.
"""

from __future__ import annotations

from verl.trainer.config.ppo_trainer import PPOTrainerConfig

KEY = "actor_rollout_ref.ref.model"


def check_ref_model(cfg: PPOTrainerConfig) -> list[str]:
    section = cfg.actor_rollout_ref.ref.model
    if section is None:
        return []
    if not isinstance(section, dict):
        return [f"{KEY}={section!r}: give null (the actor's model) or a section such as {{path: /folder}}"]
    problems = [f"{KEY}.{key} is refused: upstream's reference worker reads only {KEY}.path (the reference model is "
                "otherwise built as the actor's: override_config, trust_remote_code, dtype from ref.fsdp_config). "
                f"Remove {KEY}.{key}." for key in sorted(set(section) - {"path"})]
    path = section.get("path")
    if not path:
        problems.append(f"{KEY}.path is not set: give the reference model's folder, or set {KEY}=null to use the "
                        "actor's model")
    elif cfg.actor_rollout_ref.model.lora_rank > 0:
        problems.append(f"{KEY}.path={path!r} is refused with actor_rollout_ref.model.lora_rank > 0: with LoRA the "
                        "reference policy is the actor's base model with its adapter disabled, so no separate "
                        f"reference model is loaded. Set {KEY}=null, or lora_rank=0.")
    return problems
