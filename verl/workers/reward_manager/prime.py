"""PRIME's reward manager: every response verified in parallel scoring processes, each with its own deadline.

For slow or hang-prone verifiers (code execution, heavy symbolic checks). It is the naive manager's scoring with
a time limit that cannot be switched off and upstream's `num_processes` / `timeout` arguments: a sample whose
verification runs past `timeout` seconds (counted from when a process picks it up, not from the batch's start)
has its process killed and replaced and is scored 0 (or stops the run with on_timeout="error"). Dict results
(the built-in math_dapo/aime scorers) keep their extra fields; a timed-out row gets 0/False/None in them. A
scorer that returns None is refused, as in the other managers, not taken for a timeout.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from typing import Any

from verl.rewards.score_pool import ScorePool
from verl.workers.reward_manager.abstract import RawRewardFn
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.registry import register
from verl.workers.reward_manager.scoring import as_plain_result
from verl.workers.reward_manager.timed_scoring import DEFAULT_TIMEOUT

# Upstream's per-call limit in parallel_compute_score_async: a verifier stuck on one program does not stall the batch.
ASYNC_SCORE_TIMEOUT = 300.0


def _first_float(result: Any) -> float:
    result = as_plain_result(result)
    if isinstance(result, dict):
        return float(result["score"])
    if isinstance(result, bool | int | float):
        return float(result)
    return float(result[0])  # upstream's prime scorers return (is_correct, ...) tuples


def _call_positionally(fn: Callable[..., Any], task: Any, completion: str, reference: Any, info: Any) -> Any:
    return fn(task, completion, reference, info)


async def parallel_compute_score_async(
    evaluation_func: Callable[..., Any],
    completions: Sequence[str],
    references: Sequence[Any],
    tasks: Sequence[str],
    extra_info: Sequence[Any] | None = None,
    num_processes: int = 64,
    timeout: float = ASYNC_SCORE_TIMEOUT,
) -> list[float]:
    """One float score per completion: ``evaluation_func(task, completion, reference, extra_info)`` in up to
    ``num_processes`` processes, each call killed after ``timeout`` seconds.

    As upstream: a call that times out, raises or returns None scores 0.0; a number is taken as is, a tuple or
    list by its first element (a dict by its "score"). The processes run in a thread, so the event loop stays free.
    """
    if extra_info is None:
        extra_info = [None] * len(tasks)
    if not (len(completions) == len(references) == len(tasks) == len(extra_info)):
        raise ValueError(
            f"parallel_compute_score_async: {len(completions)} completions, {len(references)} references, "
            f"{len(tasks)} tasks and {len(extra_info)} extra_info; give one of each per sample"
        )
    calls = [
        {"task": task, "completion": completion, "reference": reference, "info": info}
        for completion, reference, task, info in zip(completions, references, tasks, extra_info, strict=True)
    ]
    if not calls:
        return []
    pool = ScorePool(functools.partial(_call_positionally, evaluation_func), num_processes=min(num_processes, len(calls)), timeout=timeout)
    try:
        outcomes = await asyncio.to_thread(pool.run, calls)
    finally:
        pool.close()
    return [
        _first_float(o.value) if o.status == "ok" and o.value is not None else 0.0 for o in outcomes
    ]


@register("prime")
class PrimeRewardManager(NaiveRewardManager):
    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: RawRewardFn | None = None,
        reward_fn_key: str = "data_source",
        num_processes: int | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        on_timeout: str = "zero",
        **reward_kwargs: Any,
    ) -> None:
        if not timeout:
            raise ValueError(
                f"reward_model.reward_manager=prime scores in processes with a deadline; timeout={timeout!r} turns "
                "that off. Set reward_model.scoring.timeout to a number of seconds, or use "
                "reward_model.reward_manager=naive to score in the driver without a limit."
            )
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout=timeout,
                         on_timeout=on_timeout, num_processes=num_processes, **reward_kwargs)
        self.num_processes = self.scorer.num_processes
        self.timeout = self.scorer.timeout
