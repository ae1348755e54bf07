"""Per-step metrics the PPO trainer logs: data statistics, stage timings, throughput, validation aggregates.

Metric names are upstream verl's (``critic/score/mean``, ``response_length/clip_ratio``, ``timing_s/gen``,
``perf/throughput``, ``val-core/<source>/<var>/mean@N`` ...) so existing dashboards keep working.

Lengths come from ``attention_mask``: its first ``P`` columns are the (left-padded) prompt, its last ``R``
columns the response, where ``R = responses.shape[-1]``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from verl.protocol import DataProto
from verl.utils.timer import marked_timer, simple_timer

__all__ = [
    "compute_data_metrics",
    "compute_timing_metrics",
    "compute_throughout_metrics",
    "compute_throughput_metrics",
    "compute_stage_throughput_metrics",
    "process_validation_metrics",
    "validation_metrics_to_dict",
    "bootstrap_metric",
    "calc_maj_val",
    "marked_timer",
    "simple_timer",
]

# Stages whose cost does not scale with this step's batch tokens; a per-token figure for them would mislead.
_NOT_PER_TOKEN = frozenset({"testing", "save_checkpoint"})
# Stages that only touch response tokens (generation); every other stage processes prompt + response.
_RESPONSE_ONLY = frozenset({"gen", "generate_sequences"})


def _require(batch: DataProto, keys: Sequence[str], caller: str) -> None:
    missing = [k for k in keys if batch.batch is None or k not in batch.batch.keys()]
    if missing:
        raise KeyError(f"{caller}: batch is missing {missing}; these are produced by earlier stages of the step "
                       f"(see the key table in verl/protocol/keys.py)")


def _prompt_response_lengths(batch: DataProto) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """(prompt_length, response_length, max_prompt_length, max_response_length) per row, as float tensors."""
    max_response_length = batch.batch["responses"].shape[-1]
    attention_mask = batch.batch["attention_mask"]
    max_prompt_length = attention_mask.shape[-1] - max_response_length
    if max_prompt_length < 0:
        raise ValueError(f"attention_mask has {attention_mask.shape[-1]} columns but responses has "
                         f"{max_response_length}; attention_mask must cover prompt + response")
    prompt_length = attention_mask[:, :max_prompt_length].sum(-1).float()
    response_length = attention_mask[:, max_prompt_length:].sum(-1).float()
    return prompt_length, response_length, max_prompt_length, max_response_length


def _compute_response_info(batch: DataProto) -> dict[str, torch.Tensor]:
    """Upstream's helper: the response part of ``attention_mask`` and each row's prompt and response lengths."""
    prompt_length, response_length, max_prompt_length, _ = _prompt_response_lengths(batch)
    response_mask = batch.batch["attention_mask"][:, max_prompt_length:]
    return {"response_mask": response_mask, "prompt_length": prompt_length, "response_length": response_length}


def _mean_max_min(prefix: str, values: torch.Tensor) -> dict[str, float]:
    if values.numel() == 0:
        raise ValueError(f"{prefix}: no valid entries (empty batch or an all-zero response_mask)")
    values = values.detach().float()
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def compute_data_metrics(batch: DataProto, use_critic: bool = True) -> dict[str, float]:
    """Scores, rewards, advantages, returns, (values), and prompt/response length statistics of one step."""
    keys = ["token_level_scores", "token_level_rewards", "advantages", "returns", "responses", "attention_mask",
            "response_mask"] + (["values"] if use_critic else [])
    _require(batch, keys, "compute_data_metrics")
    tensors = batch.batch
    response_mask = tensors["response_mask"].bool()
    prompt_length, response_length, max_prompt_length, max_response_length = _prompt_response_lengths(batch)

    metrics: dict[str, float] = {}
    metrics.update(_mean_max_min("critic/score", tensors["token_level_scores"].sum(-1)))
    metrics.update(_mean_max_min("critic/rewards", tensors["token_level_rewards"].sum(-1)))
    valid_adv = torch.masked_select(tensors["advantages"], response_mask)
    valid_returns = torch.masked_select(tensors["returns"], response_mask)
    metrics.update(_mean_max_min("critic/advantages", valid_adv))
    metrics.update(_mean_max_min("critic/returns", valid_returns))
    if use_critic:
        valid_values = torch.masked_select(tensors["values"], response_mask)
        metrics.update(_mean_max_min("critic/values", valid_values))
        # Fraction of the return variance the value function explains (1 = perfect, <= 0 = no better than a
        # constant). Unbiased variances, and 1e-5 keeps a constant-return batch finite, as upstream does.
        returns64, values64 = valid_returns.double(), valid_values.double()
        diff_var = torch.var(returns64 - values64)
        return_var = torch.var(returns64)
        metrics["critic/vf_explained_var"] = (1.0 - diff_var / (return_var + 1e-5)).item()

    metrics.update(_mean_max_min("response_length", response_length))
    metrics["response_length/clip_ratio"] = torch.eq(response_length, max_response_length).float().mean().item()
    metrics.update(_mean_max_min("prompt_length", prompt_length))
    metrics["prompt_length/clip_ratio"] = torch.eq(prompt_length, max_prompt_length).float().mean().item()
    return metrics


def compute_timing_metrics(batch: DataProto, timing_raw: dict[str, float]) -> dict[str, float]:
    """``timing_s/<stage>`` for every timed stage and ``timing_per_token_ms/<stage>`` per processed token.

    Generation (``gen``) is divided by response tokens, every other stage by prompt + response tokens;
    ``testing`` and ``save_checkpoint`` get no per-token figure (they do not process this batch).
    """
    _require(batch, ["responses", "attention_mask"], "compute_timing_metrics")
    prompt_length, response_length, _, _ = _prompt_response_lengths(batch)
    num_response_tokens = response_length.sum().item()
    num_all_tokens = prompt_length.sum().item() + num_response_tokens

    metrics = {f"timing_s/{name}": float(seconds) for name, seconds in timing_raw.items()}
    for name, seconds in timing_raw.items():
        if name in _NOT_PER_TOKEN:
            continue
        tokens = num_response_tokens if name in _RESPONSE_ONLY else num_all_tokens
        if tokens > 0:
            metrics[f"timing_per_token_ms/{name}"] = float(seconds) * 1000.0 / tokens
    return metrics


def compute_throughout_metrics(batch: DataProto, timing_raw: dict[str, float], n_gpus: int) -> dict[str, float]:
    """Tokens of the step (prompt + response), step time, and tokens per second per device.

    Upstream's spelling ("throughout") is kept; :func:`compute_throughput_metrics` is the same function.
    ``n_gpus`` is the number of training processes (devices, or CPU ranks here).
    """
    if "step" not in timing_raw:
        raise KeyError("compute_throughout_metrics: timing_raw has no 'step' entry; wrap the whole step in "
                       "marked_timer('step', timing_raw)")
    if n_gpus < 1:
        raise ValueError(f"compute_throughout_metrics: n_gpus must be >= 1, got {n_gpus}")
    token_counts = batch.meta_info.get("global_token_num")
    if token_counts is not None:
        total_num_tokens = int(sum(int(n) for n in token_counts))
    else:
        _require(batch, ["attention_mask"], "compute_throughout_metrics")
        total_num_tokens = int(batch.batch["attention_mask"].sum().item())
    step_time = float(timing_raw["step"])
    throughput = total_num_tokens / (step_time * n_gpus) if step_time > 0 else float("nan")
    return {"perf/total_num_tokens": total_num_tokens, "perf/time_per_step": step_time,
            "perf/throughput": throughput}


compute_throughput_metrics = compute_throughout_metrics

# Stages that run a model over this step's tokens; their tokens per second is a throughput worth watching.
_MODEL_STAGES = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor")


def compute_stage_throughput_metrics(batch: DataProto, timing_raw: dict[str, float]) -> dict[str, float]:
    """``perf/tokens_per_s/<stage>``: real tokens the stage processed over its wall time, for the whole batch
    (all ranks together, unlike ``perf/throughput`` which is per device).

    ``gen`` counts response tokens (what it generated); the other model stages count prompt + response tokens.
    """
    _require(batch, ["responses", "attention_mask"], "compute_stage_throughput_metrics")
    prompt_length, response_length, _, _ = _prompt_response_lengths(batch)
    response_tokens = response_length.sum().item()
    all_tokens = prompt_length.sum().item() + response_tokens
    metrics = {}
    for name in _MODEL_STAGES:
        seconds = timing_raw.get(name)
        if seconds is not None and seconds > 0:
            tokens = response_tokens if name in _RESPONSE_ONLY else all_tokens
            metrics[f"perf/tokens_per_s/{name}"] = float(tokens) / float(seconds)
    return metrics


# ---------------------------------------------------------------------------------------------------------------
# validation: per-prompt groups of N responses -> mean@N, std@N, best@k, worst@k, maj@k
# ---------------------------------------------------------------------------------------------------------------


def bootstrap_metric(data: Sequence[Any], subset_size: int, reduce_fns: Sequence[Callable[[list], float]],
                     n_bootstrap: int = 1000, seed: int = 42) -> list[tuple[float, float]]:
    """(mean, std) over ``n_bootstrap`` resamples (with replacement, of ``subset_size`` items) of each reduce_fn.

    A local generator is used so the caller's global numpy random state is left untouched.
    """
    if len(data) == 0:
        raise ValueError("bootstrap_metric: data is empty")
    rng = np.random.default_rng(seed)
    idxs = rng.integers(0, len(data), size=(n_bootstrap, subset_size))
    results: list[list[float]] = [[] for _ in reduce_fns]
    for row in idxs:
        sample = [data[i] for i in row]
        for out, fn in zip(results, reduce_fns):
            out.append(float(fn(sample)))
    return [(float(np.mean(r)), float(np.std(r))) for r in results]


def calc_maj_val(data: Sequence[dict[str, Any]], vote_key: str, val_key: str) -> float:
    """``val_key`` of the most voted ``vote_key`` value; a tie goes to the answer seen first."""
    votes: dict[Any, list[Any]] = {}
    for d in data:
        votes.setdefault(d[vote_key], []).append(d[val_key])
    winner = max(votes, key=lambda k: len(votes[k]))  # max keeps the first maximal key: ties -> first seen
    return votes[winner][0]


def _sample_sizes(n_resps: int) -> list[int]:
    """2, 4, 8, ... below n_resps, then n_resps itself."""
    sizes, n = [], 2
    while n < n_resps:
        sizes.append(n)
        n *= 2
    sizes.append(n_resps)
    return sizes


def _group_metrics(var_vals: list[Any], preds: list[Any] | None, seed: int) -> dict[str, float]:
    n_resps = len(var_vals)
    metric: dict[str, float] = {f"mean@{n_resps}": float(np.mean(var_vals))}
    if n_resps == 1:
        return metric
    metric[f"std@{n_resps}"] = float(np.std(var_vals))
    for n in _sample_sizes(n_resps):
        (best_mean, best_std), (worst_mean, worst_std) = bootstrap_metric(var_vals, n, [np.max, np.min], seed=seed)
        metric[f"best@{n}/mean"], metric[f"best@{n}/std"] = best_mean, best_std
        metric[f"worst@{n}/mean"], metric[f"worst@{n}/std"] = worst_mean, worst_std
        if preds is not None:
            vote_data = [{"val": v, "pred": p} for v, p in zip(var_vals, preds)]
            maj_fn = partial(calc_maj_val, vote_key="pred", val_key="val")
            [(maj_mean, maj_std)] = bootstrap_metric(vote_data, n, [maj_fn], seed=seed)
            metric[f"maj@{n}/mean"], metric[f"maj@{n}/std"] = maj_mean, maj_std
    return metric


def process_validation_metrics(data_sources: Sequence[str], sample_inputs: Sequence[str],
                               infos_dict: dict[str, Sequence[Any]], seed: int = 42
                               ) -> dict[str, dict[str, dict[str, float]]]:
    """Validation metrics as ``{data_source: {var_name: {metric_name: value}}}``.

    Responses are grouped by (data source, prompt text); each numeric variable of ``infos_dict`` (e.g.
    ``reward``, ``acc``) gets per-prompt ``mean@N`` and, when N > 1, ``std@N`` plus bootstrap estimates of
    ``best@k``/``worst@k`` (and ``maj@k`` when ``infos_dict`` has a ``pred`` entry to vote on) for
    k = 2, 4, ..., N. The per-prompt numbers are then averaged over the prompts of the data source.
    String variables (like ``pred``) are only used for voting, not reported.
    """
    n = len(data_sources)
    if len(sample_inputs) != n:
        raise ValueError(f"process_validation_metrics: {n} data_sources but {len(sample_inputs)} sample_inputs")
    for name, vals in infos_dict.items():
        if len(vals) != n:
            raise ValueError(f"process_validation_metrics: infos_dict[{name!r}] has {len(vals)} values, "
                             f"expected one per sample ({n})")

    groups: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, (source, prompt) in enumerate(zip(data_sources, sample_inputs)):
        groups[source][prompt].append(i)

    preds_all = infos_dict.get("pred")
    per_prompt: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for source, prompts in groups.items():
        for idxs in prompts.values():
            preds = [preds_all[i] for i in idxs] if preds_all is not None else None
            for var_name, vals in infos_dict.items():
                var_vals = [vals[i] for i in idxs]
                if isinstance(var_vals[0], str):
                    continue
                for metric_name, value in _group_metrics(var_vals, preds, seed).items():
                    per_prompt[source][var_name][metric_name].append(value)

    return {source: {var: {metric: float(np.mean(values)) for metric, values in metrics.items()}
                     for var, metrics in var2metrics.items()}
            for source, var2metrics in per_prompt.items()}


def validation_metrics_to_dict(data_src2var2metric2val: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    """Flatten :func:`process_validation_metrics` into upstream's logged names.

    ``val-core/<source>/<var>/<metric>`` for the core variable (``acc`` if present, else ``reward``) and its
    mean/maj/best metrics at the largest N; everything else goes under ``val-aux/``.
    """
    out: dict[str, float] = {}
    for source, var2metric in data_src2var2metric2val.items():
        core_var = "acc" if "acc" in var2metric else "reward"
        for var_name, metric2val in var2metric.items():
            n_max = max(int(name.split("@")[-1].split("/")[0]) for name in metric2val)
            for metric_name, value in metric2val.items():
                is_core = (var_name == core_var and metric_name.startswith(("mean", "maj", "best"))
                           and f"@{n_max}" in metric_name)
                section = "val-core" if is_core else "val-aux"
                out[f"{section}/{source}/{var_name}/{metric_name}"] = value
    return out
