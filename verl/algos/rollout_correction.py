"""Rollout correction (upstream verl's ``algorithm.rollout_correction``): importance sampling (IS) and rejection
sampling (RS) between the policy that generated the responses and the one being trained.

The rollout engine samples from pi_rollout (vLLM in bf16 here); the trainer recomputes the same tokens under
pi_old (FSDP). Their numerics differ (~0.03-0.04 mean |log-prob diff| per token measured on SmolLM2-135M), so
PPO's "on-policy" samples are in fact off-policy. With ``rho_t = pi_old(y_t) / pi_rollout(y_t)``:

- IS weights (``rollout_is``): token level ``w_t = min(rho_t, C)``; sequence level ``w = min(prod_t rho_t, C)``
  broadcast to the sequence's tokens (truncated IS, "TIS"). Ratios are built in log space and bounded to
  exp([-20, 20]) before exponentiating, so a wild token cannot overflow. Weights are 0 on padding. Optionally
  normalised to mean 1 over the batch (``rollout_is_batch_normalize``). The loss multiplies each token's loss
  by its weight (as constants).
- RS (``rollout_rs``): a token, or a whole sequence, whose ratio lies outside [lower, upper] is removed from
  training by zeroing its ``response_mask`` entries. ``token``: each rho_t; ``sequence``: prod_t rho_t;
  ``geometric``: (prod_t rho_t)^(1/T) = exp(mean_t log rho_t), which does not grow with the length. Upstream's
  divergence options (``token_k1`` ... ``seq_max_k3``, comma separated to combine) are in verl.algos.rollout_rs.
- Veto (``rollout_token_veto_threshold``): a sequence holding any token with rho_t below the threshold is
  rejected whole (a token the trainer finds catastrophically unlikely).

Bypass mode (``bypass_mode``) skips the trainer's recomputation: pi_old := pi_rollout, and IS/RS are computed
inside the loss from the current policy, rho_t = pi_theta / pi_rollout (``bypass_mode_policy_loss``).

Every function here takes tensors or a plain mapping of the settings (the keys of the config section), never the
trainer's config classes: this module sits below the trainer and the workers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from verl.algos.rollout_rs import divergence_rejection_mask, is_divergence_spec
from verl.protocol import DataProto

__all__ = [
    "IS_LEVELS",
    "RS_LEVELS",
    "LOSS_TYPES",
    "SAFETY_BOUND",
    "METRIC_PREFIX",
    "ROLLOUT_CORRECTION_META_KEY",
    "SETTING_KEYS",
    "settings_dict",
    "rs_bounds",
    "compute_is_weights",
    "compute_rejection_mask",
    "compute_offpolicy_metrics",
    "compute_rollout_correction_and_rejection_mask",
    "apply_rollout_correction",
    "apply_bypass_mode",
    "bypass_mode_policy_loss",
]

IS_LEVELS = ("token", "sequence")
RS_LEVELS = ("token", "sequence", "geometric")
LOSS_TYPES = ("ppo_clip", "reinforce")
# exp(+-20) ~ [2e-9, 4.9e8]: wide enough for any real correction, far from float32 overflow (and its square too)
SAFETY_BOUND = 20.0
METRIC_PREFIX = "rollout_corr/"
# the batch's meta_info key that carries the settings to the actor in bypass mode
ROLLOUT_CORRECTION_META_KEY = "rollout_correction"
SETTING_KEYS = (
    "rollout_is", "rollout_is_threshold", "rollout_is_batch_normalize", "rollout_rs", "rollout_rs_threshold",
    "rollout_rs_threshold_lower", "rollout_token_veto_threshold", "bypass_mode", "loss_type",
)


def settings_dict(settings: Any) -> dict[str, Any]:
    """The settings as a plain dict (from the config section, or a mapping already): what travels in meta_info."""
    if isinstance(settings, Mapping):
        return {key: settings[key] for key in SETTING_KEYS if key in settings}
    return {key: getattr(settings, key) for key in SETTING_KEYS if hasattr(settings, key)}


def rs_bounds(upper: float | str | None, lower: float | None, is_threshold: float) -> tuple[float, float]:
    """(lower, upper) of rejection sampling: a null upper follows rollout_is_threshold, a null lower is 1/upper.
    ``upper`` may come as a numeric string (the config key also takes the divergence options' "0.6_1.6" form)."""
    upper = is_threshold if upper is None else float(upper)
    lower = 1.0 / upper if lower is None else lower
    if not 0 < lower < upper:
        raise ValueError(f"rejection sampling needs 0 < lower < upper, got lower={lower}, upper={upper}")
    return lower, upper


# ---------------------------------------------------------------- small masked statistics (python floats)


def _valid_rows(mask: torch.Tensor) -> torch.Tensor:
    return mask.sum(-1) > 0


def _row_sum(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.bool(), values, torch.zeros_like(values)).sum(-1)


def _row_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return _row_sum(values, mask) / mask.sum(-1).clamp(min=1).to(values.dtype)


def _stats(name: str, values: torch.Tensor, out: dict[str, float]) -> None:
    """mean/std/min/max of a 1-D tensor into ``out``; nothing for an empty one (no invented zeros)."""
    if values.numel() == 0:
        return
    values = values.double()
    out[f"{name}_mean"] = values.mean().item()
    out[f"{name}_std"] = values.std(unbiased=False).item()
    out[f"{name}_min"] = values.min().item()
    out[f"{name}_max"] = values.max().item()


def _effective_sample_size(weights: torch.Tensor) -> float | None:
    """(sum w)^2 / (n sum w^2) = 1 / mean((w / mean w)^2): 1.0 for equal weights, 1/n when one weight holds all."""
    weights = weights.double()
    if weights.numel() == 0 or not weights.sum() > 0:
        return None
    return (weights.sum() ** 2 / (weights.numel() * (weights**2).sum())).item()


# ---------------------------------------------------------------- IS weights


def compute_is_weights(log_ratio: torch.Tensor, response_mask: torch.Tensor, level: str, threshold: float,
                       batch_normalize: bool = False) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated IS weights (bs, T), 0 on padding, and their metrics (names without the prefix).

    ``log_ratio`` = log pi_train - log pi_rollout per token. ``rollout_is_min/max`` and the ``fraction_high/low``
    metrics describe the ratios before truncation (bounded to exp(+-20)), so they show how much truncation did;
    ``rollout_is_mean/std`` and the effective sample size describe the weights the loss uses.
    """
    if level not in IS_LEVELS:
        raise ValueError(f"rollout_is must be one of {IS_LEVELS} or null, got {level!r}")
    if not threshold > 0:
        raise ValueError(f"rollout_is_threshold must be > 0, got {threshold}")
    mask = response_mask.to(torch.float32)
    valid = response_mask.bool()
    rows = _valid_rows(response_mask)
    bounded = log_ratio.float().clamp(-SAFETY_BOUND, SAFETY_BOUND)
    metrics: dict[str, float] = {}
    if level == "token":
        ratio = torch.exp(bounded)
        weights = ratio.clamp(max=threshold) * mask
        raw = ratio[valid]
    else:
        seq_log_ratio = _row_sum(log_ratio.float(), response_mask).clamp(-SAFETY_BOUND, SAFETY_BOUND)
        seq_ratio = torch.exp(seq_log_ratio)
        weights = seq_ratio.clamp(max=threshold).unsqueeze(-1) * mask
        raw = seq_ratio[rows]
    if batch_normalize:
        # token level: mean 1 over the batch's valid tokens; sequence level: over its sequences (one weight each)
        per_unit = weights[valid] if level == "token" else weights.amax(-1)[rows]
        if per_unit.numel() and per_unit.mean() > 0:
            weights = weights / per_unit.mean()
            metrics["rollout_is_batch_norm_factor"] = per_unit.mean().item()
    _stats("rollout_is", weights[valid], metrics)
    if raw.numel():
        metrics["rollout_is_min"] = raw.min().item()
        metrics["rollout_is_max"] = raw.max().item()
        metrics["rollout_is_ratio_fraction_high"] = (raw > threshold).double().mean().item()
        metrics["rollout_is_ratio_fraction_low"] = (raw < 1.0 / threshold).double().mean().item()
    ess = _effective_sample_size(weights[valid] if level == "token" else weights.amax(-1)[rows])
    if ess is not None:
        metrics["rollout_is_eff_sample_size"] = ess
    if level == "sequence" and raw.numel():
        seq_weights = weights.amax(-1)[rows]
        metrics["rollout_is_seq_mean"] = seq_weights.double().mean().item()
        metrics["rollout_is_seq_std"] = seq_weights.double().std(unbiased=False).item()
        metrics["rollout_is_seq_min"] = raw.min().item()
        metrics["rollout_is_seq_max"] = raw.max().item()
        metrics["rollout_is_seq_max_deviation"] = (raw.double() - 1.0).abs().max().item()
        metrics["rollout_is_seq_fraction_high"] = (raw > threshold).double().mean().item()
        metrics["rollout_is_seq_fraction_low"] = (raw < 1.0 / threshold).double().mean().item()
    return weights, metrics


# ---------------------------------------------------------------- rejection sampling


def compute_rejection_mask(log_ratio: torch.Tensor, response_mask: torch.Tensor, level: str | None,
                           lower: float, upper: float, veto_threshold: float | None = None
                           ) -> tuple[torch.Tensor, dict[str, float]]:
    """``response_mask`` with rejected tokens set to 0 (same dtype), and the RS metrics.

    Bounds are compared in log space on the unbounded log-ratios, which is exact at any magnitude: inside
    [lower, upper] (inclusive) is kept. ``level=None`` applies only the veto.
    """
    if level is not None and level not in RS_LEVELS:
        raise ValueError(f"rollout_rs must be one of {RS_LEVELS} or null, got {level!r}")
    log_ratio = log_ratio.float()
    valid = response_mask.bool()
    rows = _valid_rows(response_mask)
    log_lower, log_upper = math.log(lower), math.log(upper)
    keep = valid.clone()
    metrics: dict[str, float] = {}
    if level == "token":
        keep &= (log_ratio >= log_lower) & (log_ratio <= log_upper)
    elif level is not None:
        seq_stat = _row_sum(log_ratio, response_mask) if level == "sequence" else _row_mean(log_ratio, response_mask)
        keep &= ((seq_stat >= log_lower) & (seq_stat <= log_upper)).unsqueeze(-1)
    if level is not None:
        n_valid = valid.sum().item()
        rejected = valid & ~keep
        if n_valid:
            metrics["rollout_rs_masked_fraction"] = rejected.sum().item() / n_valid
        if rows.any():
            metrics["rollout_rs_seq_masked_fraction"] = rejected.any(-1)[rows].double().mean().item()
    if veto_threshold is not None:
        # the unbounded per-token ratio: one token the trainer finds >1/threshold times less likely sinks its sequence
        vetoed = (valid & (log_ratio < math.log(veto_threshold))).any(-1)
        keep &= ~vetoed.unsqueeze(-1)
        if rows.any():
            metrics["rollout_is_veto_fraction"] = vetoed[rows].double().mean().item()
    return keep.to(response_mask.dtype), metrics


# ---------------------------------------------------------------- diagnostics


def compute_offpolicy_metrics(training_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor,
                              response_mask: torch.Tensor) -> dict[str, float]:
    """How far pi_train is from pi_rollout on the sampled tokens (upstream's names, without the prefix).

    kl = mean_t (log pi_rollout - log pi_train), the k1 estimate of KL(pi_rollout || pi_train) from rollout
    samples (can be negative on a finite batch); k3_kl = mean_t (r - 1 - log r) with r = pi_train / pi_rollout,
    never negative; chi2_token = mean_t r^2 - 1; chi2_seq = mean_seq (prod_t r_t)^2 - 1. Perplexities are per
    sequence, exp(-mean_t log p), then averaged over sequences; log_ppl_diff = log_ppl_rollout - log_ppl_training.
    """
    valid = response_mask.bool()
    rows = _valid_rows(response_mask)
    if not valid.any():
        return {}
    train, rollout = training_log_prob.float(), rollout_log_prob.float()
    log_ratio = (train - rollout).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    token_lr = log_ratio[valid].double()
    metrics = {
        "kl": (-token_lr).mean().item(),
        "k3_kl": (torch.exp(token_lr) - 1.0 - token_lr).mean().item(),
        "chi2_token": (torch.exp(2.0 * token_lr).mean() - 1.0).item(),
    }
    seq_lr = _row_sum(log_ratio, response_mask)[rows].double().clamp(-SAFETY_BOUND, SAFETY_BOUND)
    metrics["chi2_seq"] = (torch.exp(2.0 * seq_lr).mean() - 1.0).item()
    log_ppl_train = -_row_mean(train, response_mask)[rows].double()
    log_ppl_rollout = -_row_mean(rollout, response_mask)[rows].double()
    diff = log_ppl_rollout - log_ppl_train
    metrics.update({
        "training_log_ppl": log_ppl_train.mean().item(),
        "rollout_log_ppl": log_ppl_rollout.mean().item(),
        "training_ppl": torch.exp(log_ppl_train).mean().item(),
        "rollout_ppl": torch.exp(log_ppl_rollout).mean().item(),
        "ppl_ratio": torch.exp(-diff).mean().item(),
        "log_ppl_diff": diff.mean().item(),
        "log_ppl_abs_diff": diff.abs().mean().item(),
        "log_ppl_diff_max": diff.max().item(),
        "log_ppl_diff_min": diff.min().item(),
    })
    return metrics


# ---------------------------------------------------------------- the whole correction


def compute_rollout_correction_and_rejection_mask(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str | None = None,
    rollout_is_threshold: float = 2.0,
    rollout_rs: str | None = None,
    rollout_rs_threshold: float | str | None = None,
    rollout_rs_threshold_lower: float | None = None,
    rollout_token_veto_threshold: float | None = None,
    rollout_is_batch_normalize: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """(IS weights or None, response_mask after rejection, metrics prefixed ``rollout_corr/``).

    ``old_log_prob`` is the training side of the ratio: pi_old in decoupled mode, pi_theta in bypass mode. IS
    weights are zeroed on the original padding only; rejection is carried by the returned mask, which the loss
    and the advantage estimators use, so rejected tokens weigh nothing whatever their IS weight.
    """
    if old_log_prob.shape != rollout_log_prob.shape or old_log_prob.shape != response_mask.shape:
        raise ValueError(f"log-prob and mask shapes differ: old {tuple(old_log_prob.shape)}, rollout "
                         f"{tuple(rollout_log_prob.shape)}, response_mask {tuple(response_mask.shape)}")
    old_log_prob, rollout_log_prob = old_log_prob.detach(), rollout_log_prob.detach()
    log_ratio = old_log_prob.float() - rollout_log_prob.float()
    metrics = compute_offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask)
    weights = None
    if rollout_is is not None:
        weights, is_metrics = compute_is_weights(log_ratio, response_mask, rollout_is, rollout_is_threshold,
                                                 rollout_is_batch_normalize)
        metrics.update(is_metrics)
    mask = response_mask
    if is_divergence_spec(rollout_rs):  # token_k1, seq_max_k2, ... (verl.algos.rollout_rs), then the veto alone
        mask, rs_metrics = divergence_rejection_mask(log_ratio, response_mask, rollout_rs, rollout_rs_threshold)
        metrics.update(rs_metrics)
        if rollout_token_veto_threshold is not None:
            lower, upper = rs_bounds(None, None, rollout_is_threshold)  # unused without a level: the veto only
            mask, veto_metrics = compute_rejection_mask(log_ratio, mask, None, lower, upper,
                                                        rollout_token_veto_threshold)
            metrics.update(veto_metrics)
    elif rollout_rs is not None or rollout_token_veto_threshold is not None:
        lower, upper = rs_bounds(rollout_rs_threshold, rollout_rs_threshold_lower, rollout_is_threshold)
        mask, rs_metrics = compute_rejection_mask(log_ratio, response_mask, rollout_rs, lower, upper,
                                                  rollout_token_veto_threshold)
        metrics.update(rs_metrics)
    return weights, mask, {METRIC_PREFIX + key: value for key, value in metrics.items()}


def _correction_kwargs(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {key: settings.get(key) for key in (
        "rollout_is", "rollout_rs", "rollout_rs_threshold", "rollout_rs_threshold_lower",
        "rollout_token_veto_threshold")} | {
        "rollout_is_threshold": settings.get("rollout_is_threshold", 2.0),
        "rollout_is_batch_normalize": bool(settings.get("rollout_is_batch_normalize", False)),
    }


def _require(batch: DataProto, key: str, why: str) -> torch.Tensor:
    if batch.batch is None or key not in batch.batch.keys():
        raise ValueError(f"rollout correction: the batch has no {key!r} ({why})")
    return batch.batch[key]


def apply_rollout_correction(batch: DataProto, settings: Any) -> dict[str, float]:
    """The trainer's stage (decoupled mode), after old_log_probs and before the advantages.

    Writes ``rollout_is_weights`` (when ``rollout_is`` is set) and replaces ``response_mask`` by the mask after
    rejection (when ``rollout_rs`` or the veto is set), so the advantage estimators, the critic and the policy loss
    all skip rejected tokens. With neither set it only measures (the diagnostics). Returns the metrics.
    """
    settings = settings_dict(settings)
    if settings.get("bypass_mode"):
        raise ValueError("apply_rollout_correction is the decoupled mode; with bypass_mode=true use apply_bypass_mode")
    hint = "set actor_rollout_ref.rollout.calculate_log_probs=true"
    rollout = _require(batch, "rollout_log_probs", hint)
    old = _require(batch, "old_log_probs", "the actor's log-prob pass must run before rollout correction")
    response_mask = _require(batch, "response_mask", "made with the responses")
    weights, mask, metrics = compute_rollout_correction_and_rejection_mask(old, rollout, response_mask,
                                                                           **_correction_kwargs(settings))
    if weights is not None:
        batch.batch["rollout_is_weights"] = weights.to(old.dtype)
    if mask is not response_mask:
        batch.batch["response_mask"] = mask
    return metrics


def apply_bypass_mode(batch: DataProto, settings: Any) -> None:
    """Bypass mode: pi_old := pi_rollout (no actor log-prob pass), and the settings go to the actor's loss.

    ``old_log_probs`` becomes a copy of the engine's ``rollout_log_probs``; the settings ride in
    ``meta_info["rollout_correction"]`` so ``bypass_mode_policy_loss`` can compute IS/RS from pi_theta.
    """
    settings = settings_dict(settings)
    rollout = _require(batch, "rollout_log_probs",
                       "bypass_mode=true uses the engine's log-probs as old_log_probs; set "
                       "actor_rollout_ref.rollout.calculate_log_probs=true")
    batch.batch["old_log_probs"] = rollout.detach().clone().float()
    batch.meta_info[ROLLOUT_CORRECTION_META_KEY] = settings


def bypass_mode_policy_loss(base_loss_fn: Callable, settings: Mapping[str, Any],
                            reinforce_loss_fn: Callable | None = None) -> Callable:
    """The actor's loss in bypass mode, where ``old_log_prob`` holds pi_rollout.

    Each micro-batch computes rho = pi_theta / pi_rollout from the current (detached) log-probs, rejects with
    ``rollout_rs``/the veto, and then
    - ``loss_type=ppo_clip``: ``base_loss_fn`` (the actor's PPO-clip loss) with the rollout policy as its anchor:
      its ratio pi_theta / pi_rollout already is the importance weight, so no extra weight is applied; with
      ``rollout_is`` set the weights are computed for their ``rollout_corr/rollout_is_*`` metrics only, as upstream;
    - ``loss_type=reinforce``: -A * w * log pi_theta (no clipping) with w the truncated IS weight (none when
      ``rollout_is`` is null), through ``reinforce_loss_fn``.
    The rollout_corr/ metrics then describe pi_theta against pi_rollout, as upstream's bypass mode logs them.
    """
    settings = dict(settings)
    loss_type = settings.get("loss_type", "ppo_clip")
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"algorithm.rollout_correction.loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    if loss_type == "reinforce" and reinforce_loss_fn is None:
        from verl.algos.policy_loss import compute_policy_loss_reinforce

        reinforce_loss_fn = compute_policy_loss_reinforce
    kwargs = _correction_kwargs(settings)

    def loss(old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor,
             response_mask: torch.Tensor, loss_agg_mode: str = "token-mean", config: Any = None,
             rollout_is_weights: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        if rollout_is_weights is not None:
            raise ValueError("bypass mode computes its IS weights in the loss; the batch must not carry "
                             "rollout_is_weights from the trainer")
        weights, mask, metrics = compute_rollout_correction_and_rejection_mask(log_prob, old_log_prob,
                                                                               response_mask, **kwargs)
        if loss_type == "ppo_clip":
            pg_loss, pg_metrics = base_loss_fn(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages,
                                               response_mask=mask, loss_agg_mode=loss_agg_mode, config=config)
        else:
            pg_loss, pg_metrics = reinforce_loss_fn(old_log_prob=old_log_prob, log_prob=log_prob,
                                                    advantages=advantages, response_mask=mask,
                                                    loss_agg_mode=loss_agg_mode, config=config,
                                                    rollout_is_weights=weights)
        return pg_loss, {**pg_metrics, **metrics}

    return loss
