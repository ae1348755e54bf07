"""Ulysses sequence parallelism (``*.ulysses_sequence_parallel_size``): the combinations the workers cannot run,
refused before Ray starts. The split itself is verl.utils.ulysses; divisibility of the GPUs by sp and the token
budgets are in checks.py with the other batch arithmetic."""

from __future__ import annotations

from verl.trainer.config.ppo_trainer import PPOTrainerConfig

ARR = "actor_rollout_ref"


def check_ulysses(cfg: PPOTrainerConfig) -> list[str]:
    arr, problems = cfg.actor_rollout_ref, []
    actor_sp, ref_sp = arr.actor.ulysses_sequence_parallel_size, arr.ref.ulysses_sequence_parallel_size
    if max(actor_sp, ref_sp) > 1 and not arr.model.use_remove_padding:
        problems.append(f"{ARR}.actor.ulysses_sequence_parallel_size={actor_sp} (ref: {ref_sp}) splits packed "
                        f"sequences; set {ARR}.model.use_remove_padding=true.")
    if cfg.use_reference_policy and ref_sp != actor_sp:
        problems.append(f"{ARR}.ref.ulysses_sequence_parallel_size={ref_sp} differs from {ARR}.actor."
                        f"ulysses_sequence_parallel_size={actor_sp}: the reference runs in the actor's worker and "
                        "shares its sequence-parallel group; leave the ref's at its default (the actor's).")
    critic_sp = cfg.critic.ulysses_sequence_parallel_size
    if cfg.use_critic and critic_sp > 1 and not cfg.critic.model.use_remove_padding:
        problems.append(f"critic.ulysses_sequence_parallel_size={critic_sp} splits packed sequences; set "
                        "critic.model.use_remove_padding=true.")
    return problems
