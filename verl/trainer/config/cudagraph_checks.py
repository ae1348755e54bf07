"""Before Ray: `actor_rollout_ref.rollout.cudagraph_capture_sizes` (vLLM's compilation_config, the hf rollout's
static-cache row counts) only means something with enforce_eager=false, and holds positive batch sizes."""

from __future__ import annotations

from typing import Any

KEY = "actor_rollout_ref.rollout.cudagraph_capture_sizes"


def cudagraph_problems(cfg: Any) -> list[str]:
    rollout = cfg.actor_rollout_ref.rollout
    sizes = rollout.cudagraph_capture_sizes
    if sizes is None:
        return []
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        return [f"{KEY}={list(sizes)}: give a list of positive batch sizes (e.g. [1,2,4,8]), or null."]
    if rollout.enforce_eager:
        return [f"{KEY}={list(sizes)} chooses which batch sizes are captured as CUDA graphs, but "
                "actor_rollout_ref.rollout.enforce_eager=true (our default) captures none: set enforce_eager=false "
                "(on a CUDA device), or remove it."]
    return []
