"""The trainer's side of ``rollout.mode=async`` (the agent loop): what the rollout is sent, and the turn and tool
metrics read back from the trajectories it returns."""

from __future__ import annotations

import numpy as np

from verl.protocol import DataProto

__all__ = ["pop_generation_input", "pop_agent_metrics", "AGENT_COLUMNS", "MEDIA_KEYS"]

GEN_KEYS = ["input_ids", "attention_mask", "position_ids"]
# a vision-language row's images, which the sync rollout generates with (they stay in the batch for the actor)
MEDIA_KEYS = ("multi_modal_inputs", "multi_modal_data")
# what the agent loop returns per trajectory (verl/workers/rollout/agent_loop/vision.py) in place of the row's
TRAJECTORY_MEDIA_KEY = "multi_modal_inputs"
# per-trajectory counters the agent loop returns for metrics only; dropped from the batch once read
AGENT_COLUMNS = ("__num_turns__", "__tool_calls__", "__tool_errors__", "__tokenization_mismatch__", "__rm_scored__",
                 "__aborted__")


def pop_generation_input(batch: DataProto, mode: str) -> DataProto:
    """The prompts' tensors, moved out of ``batch``. An agent loop reads the row's other fields too (raw_prompt,
    extra_info, agent_name, tools_kwargs, ...), so in async mode they are copied along (and stay in ``batch``
    for the reward). In sync mode only the rows' images go along (``multi_modal_inputs`` / ``multi_modal_data``,
    also kept in ``batch`` for the actor's forward).

    In async mode ``multi_modal_inputs`` is moved, not copied: the agent loop returns each trajectory's own (the
    row's images plus any a tool returned, in token order), and that is the one the actor must train on when the
    rollout output is merged back (``batch.union(output)``)."""
    gen = batch.pop(batch_keys=GEN_KEYS)
    columns = batch.non_tensor_batch
    keys = list(columns) if mode == "async" else [k for k in MEDIA_KEYS if k in columns]
    gen.non_tensor_batch = {k: columns[k].copy() for k in keys}
    if mode == "async":
        columns.pop(TRAJECTORY_MEDIA_KEY, None)
    return gen


def _stats(prefix: str, name: str, values: np.ndarray) -> dict[str, float]:
    return {f"{prefix}{name}/mean": float(values.mean()), f"{prefix}{name}/max": float(values.max()),
            f"{prefix}{name}/min": float(values.min())}


def pop_agent_metrics(batch: DataProto, prefix: str = "agent/") -> dict[str, float]:
    """Turns per sample, tool calls and errors, and model vs tool/user tokens in the responses; the counter columns
    are removed from ``batch`` (``__rm_scored__`` only once the reward has been computed: see reward.py)."""
    columns = batch.non_tensor_batch
    if "__num_turns__" not in columns or len(batch) == 0:
        return {}
    metrics = _stats(prefix, "num_turns", np.asarray(columns["__num_turns__"], dtype=float))
    for column, name in (("__tool_calls__", "tool_calls"), ("__tool_errors__", "tool_errors")):
        if column in columns:
            metrics.update(_stats(prefix, name, np.asarray(columns[column], dtype=float)))
    if "__aborted__" in columns:  # rollout.over_sample_rate: the share of rows dropped with an empty response
        metrics[f"{prefix}aborted_ratio"] = float(np.mean(np.asarray(columns["__aborted__"], dtype=float)))
    if "__tokenization_mismatch__" in columns:
        metrics[f"{prefix}tokenization_mismatch/mean"] = float(np.mean(np.asarray(columns["__tokenization_mismatch__"],
                                                                                   dtype=float)))
    response_length = batch.batch["responses"].size(1)
    real = batch.batch["attention_mask"][:, -response_length:].sum(-1).float()
    model = batch.batch["response_mask"].sum(-1).float()
    metrics[f"{prefix}response_model_tokens/mean"] = float(model.mean())
    metrics[f"{prefix}response_tool_tokens/mean"] = float((real - model).mean())
    for column in AGENT_COLUMNS:
        if column != "__rm_scored__":
            columns.pop(column, None)
    return metrics
