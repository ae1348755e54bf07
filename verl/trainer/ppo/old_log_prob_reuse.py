"""The trainer's side of skipping the old-log-prob pass (the decision: verl.trainer.config.old_log_prob_reuse).

On a step that skips it, the batch goes to the actor without ``old_log_probs`` and with the ``on_policy`` flag in
its meta_info; the actor uses its first forward's detached log-probs instead and reports ``actor/entropy`` from
it. Every step logs ``perf/old_log_prob_skipped`` (1 or 0); a skipped step has no ``timing_s/old_log_prob`` (nor
``perf/tokens_per_s/old_log_prob``): the stage did not run.
"""

from __future__ import annotations

import sys

from verl.protocol import DataProto
from verl.trainer.config.old_log_prob_reuse import OldLogProbReuse
from verl.workers.actor.on_policy import ON_POLICY_META_KEY

__all__ = ["SKIPPED_METRIC", "announce", "skip_old_log_prob_pass"]

SKIPPED_METRIC = "perf/old_log_prob_skipped"


def announce(decision: OldLogProbReuse) -> OldLogProbReuse:
    """Say once, at start, whether steps skip the pass and, when they do not, why: on stderr, like the other
    start-of-run notes (``[defaults]``, ``[checkpoint]``); a logger line as well printed it twice under Hydra."""
    print(f"[old_log_prob] {decision.describe()}", file=sys.stderr, flush=True)
    return decision


def skip_old_log_prob_pass(decision: OldLogProbReuse, batch: DataProto, metrics: dict[str, float],
                           global_step: int) -> bool:
    """True (and the batch flagged for the actor) when this step skips the pass; records the metric either way."""
    skip = decision.skips_pass(global_step)
    metrics[SKIPPED_METRIC] = 1.0 if skip else 0.0
    if skip:
        batch.meta_info[ON_POLICY_META_KEY] = True
    return skip
