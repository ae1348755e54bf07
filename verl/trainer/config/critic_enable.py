"""Before Ray: upstream's `critic.enable` (null: the advantage estimator decides; gae needs the critic's values)."""

from __future__ import annotations

from typing import Any


def critic_enable_problems(cfg: Any) -> list[str]:
    enable, estimator = cfg.critic.enable, cfg.algorithm.adv_estimator
    if enable is None or bool(enable) == (estimator == "gae"):
        return []
    if not enable:
        return [f"critic.enable=false with algorithm.adv_estimator={estimator}: GAE's advantages need the critic's "
                "values; remove critic.enable (null: on for gae), or pick an estimator without a critic (grpo, rloo...)."]
    return [f"critic.enable=true with algorithm.adv_estimator={estimator}: training a critic whose values no "
            "advantage uses is not built; remove critic.enable (null: the estimator decides), or use adv_estimator=gae."]
