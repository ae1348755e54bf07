"""Before Ray: upstream v0.7's rollout keys whose refusal depends on another key.

``scheduling_policy=priority`` is vLLM's scheduler; the hf rollout has none (one batched generate call, in order).
``multi_turn.num_repeat_rollouts`` is read by upstream's CollabLLM recipe loop only; here user agent loops
(``agent.agent_loop_config_path``) see it as ``self.config.actor_rollout_ref.rollout.multi_turn.num_repeat_rollouts``,
and no built-in loop reads it, so without such a loop it would be ignored: refused.
"""

from __future__ import annotations

from typing import Any

__all__ = ["rollout_v07_problems"]

R = "actor_rollout_ref.rollout"


def rollout_v07_problems(cfg: Any) -> list[str]:
    rollout = cfg.actor_rollout_ref.rollout
    problems = []
    if rollout.scheduling_policy != "fcfs" and rollout.name == "hf":
        problems.append(f"{R}.scheduling_policy={rollout.scheduling_policy} is vLLM's request scheduler; the hf rollout "
                        "has none (one batched generate call, in order, which is fcfs). Set scheduling_policy=fcfs, "
                        f"or use {R}.name=vllm.")
    repeats = rollout.multi_turn.num_repeat_rollouts
    if repeats is not None and rollout.agent.agent_loop_config_path is None:
        problems.append(f"{R}.multi_turn.num_repeat_rollouts={repeats} is read by agent loops of your own only "
                        "(upstream's CollabLLM recipe loop); no built-in loop reads it, so it would change nothing. "
                        f"List your loop in {R}.agent.agent_loop_config_path (and set {R}.mode=async), or remove it.")
    return problems
