"""The actor's forward with ``actor.use_prefix_grouper`` (verl.models.prefix_grouper): the log-probs and entropies
of a micro-batch from one forward per distinct prompt, for ``compute_log_prob`` and ``update_policy`` alike.

Equal to the padded path on the real response tokens (fp32: to rounding); zero on response padding, as the packed
path (those entries are masked downstream). Upstream's limits hold: no remove-padding / Ulysses (the grouped rows
are padded rows), no dynamic batch size, no sum_pi_squared, no vision-language batches; the pre-Ray check
(verl.trainer.config.prefix_grouper_checks) refuses the configurations, and the constructor check below refuses the
same for a DataParallelPPOActor built in Python.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.models.packing import scatter_to_padded
from verl.models.prefix_grouper import enable_prefix_grouper_attention, group_rows, grouped_forward
from verl.utils.torch_functional import logprobs_from_logits

__all__ = ["enable_prefix_grouping", "prefix_grouped_forward"]

_KEY = "actor_rollout_ref.actor.use_prefix_grouper"


def enable_prefix_grouping(config, actor_module: torch.nn.Module) -> bool:
    """Whether ``config`` asks for prefix grouping; if so, refuse what it cannot run and switch the attention."""
    if not getattr(config, "use_prefix_grouper", False):
        return False
    refused = []
    if getattr(config, "use_remove_padding", False):
        refused.append("use_remove_padding=true (set actor_rollout_ref.model.use_remove_padding=false)")
    if int(getattr(config, "ulysses_sequence_parallel_size", 1) or 1) > 1:
        refused.append("ulysses_sequence_parallel_size > 1 (set it to 1)")
    if getattr(config, "use_dynamic_bsz", False):
        refused.append("use_dynamic_bsz=true (set actor_rollout_ref.actor.use_dynamic_bsz=false)")
    if getattr(config, "calculate_sum_pi_squared", False):
        refused.append("calculate_sum_pi_squared=true (set it to false)")
    if refused:
        raise ValueError(f"{_KEY}=true runs padded rows grouped by prompt and does not combine with "
                         + "; ".join(refused) + f", or set {_KEY}=false")
    enable_prefix_grouper_attention(actor_module)
    return True


def prefix_grouped_forward(actor, micro_batch: TensorDict, temperature: float, calculate_entropy: bool,
                           sum_pi_squared: list | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``actor._forward_micro_batch`` with prefix grouping: (bs, R) log-probs and, when asked, entropies."""
    if sum_pi_squared is not None:
        raise ValueError(f"{_KEY}=true does not compute sum_pi_squared (as upstream); set {_KEY}=false with "
                         "algorithm.adv_estimator=optimal_token_baseline")
    if actor._multi_modal_inputs is not None:
        raise ValueError(f"{_KEY}=true does not support vision-language batches (as upstream); set {_KEY}=false")
    responses = micro_batch["responses"]
    rows = group_rows(micro_batch["input_ids"], micro_batch["attention_mask"], micro_batch["position_ids"],
                      responses.size(-1))
    logits = grouped_forward(actor.actor_module, rows, actor._logits_to_keep)
    if temperature != 1.0:
        logits = logits / temperature
    log_probs = scatter_to_padded(logprobs_from_logits(logits, responses[rows.targets]), rows.targets)
    entropy = scatter_to_padded(actor._entropy(logits), rows.targets) if calculate_entropy else None
    return log_probs, entropy
