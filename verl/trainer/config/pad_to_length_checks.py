"""`pad_to_length` (upstream's engine key, after v0.7), checked before Ray: it pads the packed row of
`use_remove_padding`, so each role that sets it must pack; router replay's recorded routes cover real tokens only
(upstream raises on that combination too)."""

from __future__ import annotations

from verl.trainer.config.ppo_trainer import PPOTrainerConfig

__all__ = ["check_pad_to_length"]

ARR = "actor_rollout_ref"


def _unpacked(key: str, packing_key: str) -> str:
    return (f"{key}=true pads the packed row of use_remove_padding, but {packing_key}=false runs padded rows, which "
            f"already have the fixed length prompt + response; set {packing_key}=true, or leave {key} out.")


def check_pad_to_length(cfg: PPOTrainerConfig) -> list[str]:
    arr = cfg.actor_rollout_ref
    problems = []
    roles = [("actor", arr.actor, True), ("ref", arr.ref, cfg.use_reference_policy)]
    for name, role, used in roles:
        if not (used and role.pad_to_length):
            continue
        key = f"{ARR}.{name}.pad_to_length"
        if not role.use_remove_padding:
            problems.append(_unpacked(key, f"{ARR}.model.use_remove_padding"))
        if role.router_replay.mode != "disabled":
            problems.append(f"{key}=true does not combine with {ARR}.{name}.router_replay.mode="
                            f"{role.router_replay.mode} (as upstream): the replayed routes cover the real tokens, not "
                            "the pad; set pad_to_length=false.")
    if cfg.use_critic and cfg.critic.model.fsdp_config.pad_to_length and not cfg.critic.model.use_remove_padding:
        problems.append(_unpacked("critic.model.fsdp_config.pad_to_length", "critic.model.use_remove_padding"))
    rm = cfg.reward_model
    if rm.enable and rm.model.fsdp_config.pad_to_length and not rm.model.use_remove_padding:
        problems.append(_unpacked("reward_model.model.fsdp_config.pad_to_length", "reward_model.model.use_remove_padding"))
    return problems
