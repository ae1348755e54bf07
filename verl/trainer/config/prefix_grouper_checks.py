"""``actor_rollout_ref.actor.use_prefix_grouper`` (verl.models.prefix_grouper), checked before Ray: the
combinations upstream refuses or documents as unsupported, each named with its fix.

- trainer.balance_batch=true: upstream raises (it reorders the rows of a prompt apart);
- model.use_remove_padding=true and Ulysses (which needs it): the grouped rows are padded rows;
- actor.use_dynamic_bsz / rollout.log_prob_use_dynamic_bsz: token-count micro-batches split the groups;
- actor.calculate_sum_pi_squared (optimal_token_baseline): upstream asserts it off;
- the prefix_grouper package must be installed.
"""

from __future__ import annotations

import importlib.util

from verl.trainer.config.ppo_trainer import PPOTrainerConfig

__all__ = ["check_prefix_grouper"]

ARR = "actor_rollout_ref"
KEY = f"{ARR}.actor.use_prefix_grouper=true"


def check_prefix_grouper(cfg: PPOTrainerConfig) -> list[str]:
    arr = cfg.actor_rollout_ref
    actor = arr.actor
    if not actor.use_prefix_grouper:
        return []
    problems = []
    if cfg.trainer.balance_batch:
        problems.append(f"{KEY} needs the rows of one prompt kept together, but trainer.balance_batch=true reorders "
                        "them across workers; set trainer.balance_batch=false.")
    if actor.use_remove_padding:
        problems.append(f"{KEY} runs padded rows grouped by prompt, not packed ones; set "
                        f"{ARR}.model.use_remove_padding=false.")
    if actor.ulysses_sequence_parallel_size > 1:
        problems.append(f"{KEY} does not combine with {ARR}.actor.ulysses_sequence_parallel_size="
                        f"{actor.ulysses_sequence_parallel_size} (sequence parallelism splits packed rows); set it to 1.")
    if actor.use_dynamic_bsz:
        problems.append(f"{KEY} does not combine with {ARR}.actor.use_dynamic_bsz=true (as upstream: token-count "
                        f"micro-batches split the groups); set {ARR}.actor.use_dynamic_bsz=false.")
    elif arr.rollout.log_prob_use_dynamic_bsz:
        problems.append(f"{KEY} does not combine with {ARR}.rollout.log_prob_use_dynamic_bsz=true (the old-log-prob "
                        f"pass runs grouped); set {ARR}.rollout.log_prob_use_dynamic_bsz=false.")
    if actor.calculate_sum_pi_squared:
        problems.append(f"{KEY} does not compute sum_pi_squared (as upstream); set {ARR}.actor."
                        "calculate_sum_pi_squared=false (algorithm.adv_estimator=optimal_token_baseline needs it: "
                        "use another estimator or the ungrouped forward).")
    if importlib.util.find_spec("prefix_grouper") is None:
        problems.append(f"{KEY} needs the prefix_grouper package, which is not installed: "
                        "`pip install prefix-grouper==0.0.1.post1`.")
    return problems
