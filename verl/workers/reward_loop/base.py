"""The reward loop's reward managers: one sample in, ``{"reward_score": float, "reward_extra_info": dict}`` out.

Upstream's interface (``verl.experimental.reward_loop.reward_manager``): a manager implements ``async run_single(data)``
for a one-row ``DataProto``; the loop runs many of them at once. ``RewardManagerBase`` also gives every such manager
the batch managers' call, ``manager(data, return_dict=True)``, so the same class works with
``reward_model.use_reward_loop=false`` (all rows scored together after generation).

``get_reward_loop_manager_cls(name)``: a manager registered here by ``@register``, else none (the loop then runs the
batch manager of that name one sample at a time: adapter.py).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import torch

from verl.protocol import DataProto
from verl.workers.reward_manager.abstract import precomputed_scores
from verl.workers.reward_manager.batch_text import valid_response_lengths

__all__ = ["RewardManagerBase", "REWARD_LOOP_MANAGER_REGISTRY", "register", "get_reward_loop_manager_cls",
           "SampleScore", "check_sample_score"]

# run_single's result: {"reward_score": float, "reward_extra_info": {name: value}}
SampleScore = dict

REWARD_LOOP_MANAGER_REGISTRY: dict[str, type] = {}


def register(name: str) -> Callable[[type], type]:
    """Class decorator: a per-sample manager selectable as ``reward_model.reward_manager=<name>`` in the loop."""

    def decorator(cls: type) -> type:
        existing = REWARD_LOOP_MANAGER_REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"reward-loop manager {name!r} is already registered to "
                             f"{existing.__module__}.{existing.__qualname__}")
        REWARD_LOOP_MANAGER_REGISTRY[name] = cls
        return cls

    return decorator


def get_reward_loop_manager_cls(name: str) -> type | None:
    return REWARD_LOOP_MANAGER_REGISTRY.get(name)


def check_sample_score(result: Any, where: str) -> SampleScore:
    """A run_single result, checked: a dict with a finite numeric reward_score and a dict of extra info."""
    if not isinstance(result, dict) or "reward_score" not in result:
        raise TypeError(f"{where} returned {result!r}; run_single must return "
                        "{'reward_score': float, 'reward_extra_info': {...}}")
    score = result["reward_score"]
    if isinstance(score, torch.Tensor) and score.numel() == 1:
        score = score.item()
    if isinstance(score, bool) or not isinstance(score, int | float) or score != score or abs(score) == float("inf"):
        raise TypeError(f"{where} returned reward_score={score!r}; it must be a finite number")
    extra = result.get("reward_extra_info") or {}
    if not isinstance(extra, dict):
        raise TypeError(f"{where} returned reward_extra_info of type {type(extra).__name__}; it must be a dict")
    return {"reward_score": float(score), "reward_extra_info": dict(extra)}


class RewardManagerBase(ABC):
    """A per-sample reward manager. ``tokenizer`` decodes the policy's responses. Subclasses implement
    ``run_single``; ``init_class`` runs once per class and process (upstream's hook for shared state)."""

    _class_initialized = False

    def __init__(self, config: Any = None, tokenizer: Any = None) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.init_class(config, tokenizer)

    @classmethod
    def init_class(cls, config: Any, tokenizer: Any) -> None:
        cls._class_initialized = True

    def close(self) -> None:
        return None

    @abstractmethod
    async def run_single(self, data: DataProto) -> SampleScore:
        """The score of the one row of ``data``, and its extra info."""

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        """The batch managers' interface: every row through run_single, all at once, in a private event loop."""
        from verl.workers.reward_loop.merge import merge_sample_scores

        precomputed = precomputed_scores(data, return_dict)
        if precomputed is not None:
            return precomputed

        async def score_all() -> list[SampleScore]:
            return list(await asyncio.gather(*[self.run_single(data[i:i + 1]) for i in range(len(data))]))

        results = [check_sample_score(r, f"{type(self).__name__}.run_single (row {i})")
                   for i, r in enumerate(asyncio.run(score_all()))]
        responses = data.batch["responses"]
        reward_tensor, extra = merge_sample_scores(results, valid_response_lengths(data).tolist(), responses.shape[-1])
        if return_dict:
            return {"reward_tensor": reward_tensor.to(responses.device), "reward_extra_info": extra}
        return reward_tensor.to(responses.device)
