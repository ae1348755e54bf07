"""fsdp_config.fsdp_size in RL (HSDP), checked before Ray: -1 shards a role over all of its ranks; a positive size
must divide the role's rank count, which then holds world / fsdp_size replicas of fsdp_size-rank shard groups."""

from __future__ import annotations

import warnings

from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.utils.config_errors import ConfigWarning

__all__ = ["check_hsdp"]


def _size_problem(key: str, size: int, ranks: int) -> list[str]:
    if size == -1 or (size > 0 and ranks % size == 0):
        return []
    if size > ranks:
        # upstream's device mesh (and ours, fsdp_utils.create_device_mesh) shards over all ranks then: a script
        # written for a bigger cluster runs as plain FSDP on a smaller one
        warnings.warn(f"{key}={size} is more than the role's {ranks} ranks (trainer.nnodes x trainer.n_gpus_per_node): "
                      f"one shard group over all {ranks}, as upstream, i.e. fsdp_size=-1.", ConfigWarning, stacklevel=3)
        return []
    if size <= 0:
        return [f"{key}={size}: use -1 (shard over all {ranks} ranks) or a positive number of ranks per shard group "
                f"that divides {ranks}."]
    divisors = [d for d in range(1, ranks + 1) if ranks % d == 0]
    return [f"{key}={size} does not divide the role's {ranks} ranks (trainer.nnodes x trainer.n_gpus_per_node): "
            f"HSDP needs whole shard groups; use one of {divisors} or -1."]


def check_hsdp(cfg: PPOTrainerConfig) -> list[str]:
    world = cfg.trainer.nnodes * cfg.trainer.n_gpus_per_node
    arr = cfg.actor_rollout_ref
    roles = [("actor_rollout_ref.actor", arr.actor.fsdp_config.fsdp_size, world)]
    if cfg.use_reference_policy and not cfg.ref_in_actor:
        roles.append(("actor_rollout_ref.ref", arr.ref.fsdp_config.fsdp_size, world))
    if cfg.use_critic:
        roles.append(("critic.model", cfg.critic.model.fsdp_config.fsdp_size, world))
    rm = cfg.reward_model
    if rm.enable and not rm.rollout.name:  # a generative judge runs on its own engine, not an FSDP worker
        rm_world = rm.nnodes * rm.n_gpus_per_node if rm.enable_resource_pool else world
        roles.append(("reward_model.model", rm.model.fsdp_config.fsdp_size, rm_world))
    problems: list[str] = []
    for prefix, size, ranks in roles:
        problems += _size_problem(f"{prefix}.fsdp_config.fsdp_size", size, ranks)
    return problems
