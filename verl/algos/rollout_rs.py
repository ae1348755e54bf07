"""Divergence-based rejection sampling (upstream's ``rollout_rs`` options ``token_k1`` ... ``seq_max_k3``).

With ``log_ratio = log pi_train - log pi_rollout`` per token (bounded to +-20 first), three per-token statistics:

    k1 = -log_ratio                        (a log ratio; compared with [log lower, log upper])
    k2 = 0.5 * log_ratio^2                 (compared with an upper bound)
    k3 = exp(log_ratio) - 1 - log_ratio    (>= 0, KL(pi_rollout || pi_train) in expectation; upper bound)

``token_kN`` keeps each token by its own statistic; ``seq_sum_kN`` / ``seq_mean_kN`` / ``seq_max_kN`` (k2, k3 only)
keep or drop whole sequences by the sum / mean / max of their valid tokens' statistic. Several options, comma
separated (``"token_k1,seq_max_k2"``), must all pass (logical AND). ``rollout_rs_threshold`` gives one threshold
shared by all options, or one per option, comma separated in the same order: ``lower_upper`` (ratios, e.g.
``"0.6_1.6"``) or a single upper ratio (lower = 1/upper) for the k1 options, a single positive upper bound for the
others. Rejected tokens get 0 in the response mask.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["DIVERGENCE_RS_OPTIONS", "is_divergence_spec", "parse_rs_options", "parse_rs_thresholds",
           "divergence_rejection_mask"]

_STATS = ("k1", "k2", "k3")
DIVERGENCE_RS_OPTIONS = (
    *(f"token_{k}" for k in _STATS), *(f"seq_sum_{k}" for k in _STATS), *(f"seq_mean_{k}" for k in _STATS),
    "seq_max_k2", "seq_max_k3",
)
_BOUND = 20.0  # as verl.algos.rollout_correction.SAFETY_BOUND


def _parts(spec: Any, what: str) -> list[str]:
    if isinstance(spec, int | float) and not isinstance(spec, bool):
        return [str(spec)]
    if not isinstance(spec, str):
        raise TypeError(f"{what} must be a string or a number, got {type(spec).__name__}")
    return [part.strip() for part in spec.split(",") if part.strip()]


def is_divergence_spec(spec: Any) -> bool:
    """Whether ``rollout_rs`` names divergence options (rather than the ratio levels token/sequence/geometric)."""
    return isinstance(spec, str) and any(part in DIVERGENCE_RS_OPTIONS for part in _parts(spec, "rollout_rs"))


def parse_rs_options(spec: str) -> list[str]:
    """The distinct options of a comma-separated ``rollout_rs``, in order; ValueError naming an unknown one."""
    options: list[str] = []
    for part in _parts(spec, "rollout_rs"):
        if part not in DIVERGENCE_RS_OPTIONS:
            raise ValueError(f"rollout_rs option {part!r} is unknown; use {', '.join(DIVERGENCE_RS_OPTIONS)} "
                             "(comma separated to combine), or one of token, sequence, geometric alone")
        if part not in options:
            options.append(part)
    if not options:
        raise ValueError("rollout_rs names no option")
    return options


def parse_rs_thresholds(options: list[str], threshold: Any) -> dict[str, tuple[float | None, float]]:
    """{option: (lower ratio or None, upper)} from ``rollout_rs_threshold``; ValueError saying what is wrong."""
    if threshold is None:
        raise ValueError(f"rollout_rs={','.join(options)} needs rollout_rs_threshold (one value, or one per option)")
    specs = _parts(threshold, "rollout_rs_threshold")
    if len(specs) not in (1, len(options)):
        raise ValueError(f"rollout_rs_threshold has {len(specs)} values for {len(options)} rollout_rs options; "
                         "give one shared value or one per option, comma separated in the same order")
    specs = specs * len(options) if len(specs) == 1 else specs
    out: dict[str, tuple[float | None, float]] = {}
    for option, spec in zip(options, specs):
        try:
            if option.endswith("k1"):
                low_text, _, high_text = spec.partition("_") if "_" in spec else ("", "", spec)
                upper = float(high_text)
                lower = float(low_text) if low_text else (1.0 / upper if upper > 0 else upper)
            else:
                if "_" in spec:
                    raise ValueError(f"{option} takes one upper bound, got {spec!r} (lower_upper is for *_k1)")
                lower, upper = None, float(spec)
        except ValueError as err:
            raise ValueError(f"rollout_rs_threshold {spec!r} for {option}: {err}") from None
        if upper <= 0 or (lower is not None and (lower <= 0 or lower > upper)):
            raise ValueError(f"rollout_rs_threshold {spec!r} for {option}: bounds must be positive, lower <= upper")
        out[option] = (lower, upper)
    return out


def _row_reduce(values: torch.Tensor, valid: torch.Tensor, how: str) -> torch.Tensor:
    if how == "max":
        filled = values.masked_fill(~valid, float("-inf")).amax(-1)
        return torch.where(torch.isinf(filled), torch.zeros_like(filled), filled)
    total = (values * valid).sum(-1)
    return total if how == "sum" else total / valid.sum(-1).clamp(min=1)


def divergence_rejection_mask(log_ratio: torch.Tensor, response_mask: torch.Tensor, rollout_rs: str,
                              rollout_rs_threshold: Any) -> tuple[torch.Tensor, dict[str, float]]:
    """``response_mask`` with every token that fails any option set to 0, and upstream's metric names (unprefixed):
    per option ``rollout_rs_<option>_masked_fraction`` / ``_seq_masked_fraction``, and the totals."""
    options = parse_rs_options(rollout_rs)
    bounds = parse_rs_thresholds(options, rollout_rs_threshold)
    lr = log_ratio.double().clamp(-_BOUND, _BOUND)
    stats = {"k1": -lr, "k2": 0.5 * lr.square(), "k3": torch.exp(lr) - 1.0 - lr}
    valid = response_mask.bool()
    rows = valid.any(-1)
    keep_all = torch.ones_like(valid)
    metrics: dict[str, float] = {}
    for option in options:
        level, stat_name = option.rsplit("_", 1)
        lower, upper = bounds[option]
        stat = stats[stat_name]
        if level != "token":
            stat = _row_reduce(stat, valid, level.split("_")[1]).unsqueeze(-1).expand_as(lr)
        if stat_name == "k1":
            keep = (stat >= math.log(lower)) & (stat <= math.log(upper))
        else:
            keep = stat <= upper
        keep_all &= keep
        failed = valid & ~keep
        if valid.any():
            metrics[f"rollout_rs_{option}_masked_fraction"] = failed.sum().item() / valid.sum().item()
        if rows.any():
            metrics[f"rollout_rs_{option}_seq_masked_fraction"] = failed.any(-1)[rows].double().mean().item()
    rejected = valid & ~keep_all
    if valid.any():
        metrics["rollout_rs_masked_fraction"] = rejected.sum().item() / valid.sum().item()
    if rows.any():
        metrics["rollout_rs_seq_masked_fraction"] = rejected.any(-1)[rows].double().mean().item()
    return (response_mask * keep_all.to(response_mask.dtype)).to(response_mask.dtype), metrics
