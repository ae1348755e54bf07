"""The interface every reward manager implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from verl.protocol import DataProto

# A user's scoring function: compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs).
RawRewardFn = Callable[..., Any]


class AbstractRewardManager(ABC):
    """Turns a batch of rollouts into `reward_tensor` (bs, response_len): the score on each row's last
    response token, zeros elsewhere."""

    # The keyword arguments this manager passes to compute_score; custom reward files are checked against them.
    compute_score_params: tuple[str, ...] = ("data_source", "solution_str", "ground_truth", "extra_info")

    @abstractmethod
    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: RawRewardFn | None,
        reward_fn_key: str = "data_source",
        **kwargs: Any,
    ) -> None: ...

    @classmethod
    def kwargs_from_config(cls, config: Any) -> dict[str, Any]:
        """Constructor arguments this manager reads from the full trainer config (explicit kwargs win)."""
        return {}

    def close(self) -> None:
        """Release what scoring holds (the built-in managers: their scoring processes). Safe to call twice; the
        processes also end when the manager is garbage-collected or the interpreter exits."""
        return None

    @abstractmethod
    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        """`reward_tensor`, or `{"reward_tensor": ..., "reward_extra_info": dict[str, list]}` with return_dict."""


def precomputed_scores(data: DataProto, return_dict: bool) -> torch.Tensor | dict[str, Any] | None:
    """A reward-model worker already scored the batch (`rm_scores`): hand those through unchanged."""
    if data.batch is None or "rm_scores" not in data.batch.keys():
        return None
    scores = data.batch["rm_scores"]
    if not return_dict:
        return scores
    extra_keys = data.meta_info.get("reward_extra_keys", [])
    return {"reward_tensor": scores, "reward_extra_info": {key: list(data.non_tensor_batch[key]) for key in extra_keys}}
