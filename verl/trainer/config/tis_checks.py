"""Before Ray: `actor_rollout_ref.actor.tis_imp_ratio_cap` (upstream's truncated IS, verl.algos.tis) needs the
engine's log-probs and acts in upstream's vanilla loss only."""

from __future__ import annotations

from typing import Any

ARR = "actor_rollout_ref"


def tis_problems(cfg: Any) -> list[str]:
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    cap = actor.tis_imp_ratio_cap
    if not cap > 0:
        return []
    key = f"{ARR}.actor.tis_imp_ratio_cap={cap}"
    problems = []
    if not rollout.calculate_log_probs:
        problems.append(f"{key} weights the loss by pi_old / pi_rollout, which needs the rollout engine's log-probs: "
                        f"set {ARR}.rollout.calculate_log_probs=true.")
    mode = actor.policy_loss.loss_mode
    if mode != "vanilla":
        problems.append(f"{key} is upstream's truncated IS of the vanilla PPO loss, but policy_loss.loss_mode={mode}; "
                        "for other losses use algorithm.rollout_correction.rollout_is=token with "
                        f"rollout_is_threshold={cap} (tis_imp_ratio_cap=-1).")
    if cfg.algorithm.rollout_correction.rollout_is is not None:
        problems.append(f"{key} and algorithm.rollout_correction.rollout_is="
                        f"{cfg.algorithm.rollout_correction.rollout_is} both weight the loss by pi_old / pi_rollout; "
                        "give one (rollout_is=token with rollout_is_threshold is the same truncation).")
    return problems
