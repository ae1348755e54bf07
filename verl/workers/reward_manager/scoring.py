"""Checking what a compute_score function returned, collecting its extra fields, printing examples."""

from __future__ import annotations

import functools
import math
import numbers
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from verl.rewards.result import RewardResult


class RewardScoreError(RuntimeError):
    """compute_score failed or returned something that is not a score, for a named sample."""


def describe_fn(fn: Callable[..., Any]) -> str:
    """'module.function' (looking through functools.partial) for error messages."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}.{name}"


def _where(index: int, data_source: Any, fn: Callable[..., Any]) -> str:
    return f"sample {index} (data_source={data_source!r}) scored by {describe_fn(fn)}"


def _as_float(value: Any, index: int, data_source: Any, fn: Callable[..., Any], what: str) -> float:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if not isinstance(value, numbers.Real):
        raise RewardScoreError(
            f"{_where(index, data_source, fn)} returned {what} {value!r} of type {type(value).__name__}; "
            "compute_score must return a float, int, bool, or a dict with a numeric 'score'"
        )
    result = float(value)
    if not math.isfinite(result):
        raise RewardScoreError(f"{_where(index, data_source, fn)} returned the non-finite {what} {result}")
    return result


def unpack_score(result: Any, index: int, data_source: Any, fn: Callable[..., Any]) -> tuple[float, dict[str, Any]]:
    """(reward, extra fields). A dict result must hold "score"; all its keys become extra info (as upstream).
    A RewardResult counts as its `to_dict()`: its metrics (and non-empty metadata) become the extra info."""
    result = as_plain_result(result)
    if isinstance(result, dict):
        if "score" not in result:
            raise RewardScoreError(
                f"{_where(index, data_source, fn)} returned a dict without 'score' (keys: {sorted(result)})"
            )
        return _as_float(result["score"], index, data_source, fn, "score"), dict(result)
    return _as_float(result, index, data_source, fn, "score"), {}


def as_plain_result(result: Any) -> Any:
    """A RewardResult as the dict it stands for; any other result unchanged."""
    return result.to_dict() if isinstance(result, RewardResult) else result


def call_score_fn(fn: Callable[..., Any], index: int, data_source: Any, **kwargs: Any) -> Any:
    """Call fn(data_source=..., **kwargs); a failure is re-raised naming the sample, chained to the cause."""
    try:
        return fn(data_source=data_source, **kwargs)
    except Exception as exc:
        raise RewardScoreError(f"{_where(index, data_source, fn)} raised {type(exc).__name__}: {exc}") from exc


class ExtraInfoCollector:
    """Per-sample extra fields -> dict[str, list] with one entry per sample, or an error naming the gap."""

    def __init__(self) -> None:
        self._values: dict[str, list[Any]] = defaultdict(list)

    def add(self, fields: dict[str, Any]) -> None:
        for key, value in fields.items():
            self._values[key].append(value)

    def result(self, batch_size: int) -> dict[str, list[Any]]:
        for key, values in self._values.items():
            if len(values) != batch_size:
                raise RewardScoreError(
                    f"reward extra field {key!r} was returned for {len(values)} of {batch_size} samples; "
                    "compute_score must return the same dict keys for every sample (or plain numbers for all)"
                )
        return dict(self._values)


class ExamplePrinter:
    """Prints the first `num_examine` samples of each data_source, so a run's log shows what is rewarded."""

    def __init__(self, num_examine: int) -> None:
        self.num_examine = num_examine
        self._printed: dict[Any, int] = defaultdict(int)

    def maybe_print(self, data_source: Any, prompt: str, response: str, ground_truth: Any, result: Any) -> None:
        if self._printed[data_source] >= self.num_examine:
            return
        self._printed[data_source] += 1
        print("[prompt]", prompt)
        print("[response]", response)
        print("[ground_truth]", ground_truth)
        result = as_plain_result(result)
        if isinstance(result, dict):
            for key, value in result.items():
                print(f"[{key}]", value)
        else:
            print("[score]", result)


def place_scores(
    rewards: list[float], lengths: list[int], response_length: int, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """(bs, response_length) float32 zeros with each reward on its row's last real response token.

    A row without response tokens keeps its reward at position 0, where the response mask hides it.
    """
    reward_tensor = torch.zeros(len(rewards), response_length, dtype=torch.float32)
    for row, (reward, length) in enumerate(zip(rewards, lengths)):
        reward_tensor[row, max(length - 1, 0)] = reward
    return reward_tensor.to(device)
