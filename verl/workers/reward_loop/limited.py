"""``rate_limited``: a per-sample reward manager for scoring functions that call a remote judge (upstream's
RateLimitedRewardManager, with the same keys).

``compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)`` may be a plain function (run
on the loop's scoring threads) or a coroutine function (awaited). Before each call the manager waits for a
request-per-minute token (``reward_model.max_rpm``), ``reward_model.estimated_tokens_per_request`` tokens-per-minute
tokens (``reward_model.max_tpm``) and one of ``reward_model.max_concurrent`` slots. Each call has a deadline,
``reward_model.timeout`` (null: ``reward_model.scoring.timeout``): past it the sample is scored 0 and flagged
(``reward_timeout``, summed in ``reward/timeouts``), or the run stops (``reward_model.scoring.on_timeout=error``). Any
other failure (a judge that is down after its retries, a verdict that cannot be parsed) stops the run with an error
naming the sample and the cause: never a silent 0.

Results are read as by the batch managers: a number is the score, a dict's ``score`` is the score and all its keys
are extra info.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import sys
from typing import Any

from verl.protocol import DataProto
from verl.rewards import default_compute_score
from verl.workers.reward_loop.base import RewardManagerBase, SampleScore, register
from verl.workers.reward_loop.rate_limit import RateLimits
from verl.workers.reward_manager.scoring import RewardScoreError, describe_fn, unpack_score
from verl.workers.reward_manager.timed_scoring import TIMEOUT_FIELD, RewardTimeoutError

__all__ = ["RateLimitedRewardManager"]

_LIMIT_KEYS = ("max_concurrent", "max_rpm", "max_tpm", "estimated_tokens_per_request", "timeout")


def _from_config(config: Any, key: str) -> Any:
    section = getattr(config, "reward_model", None)
    return getattr(section, key, None) if section is not None else None


@register("rate_limited")
class RateLimitedRewardManager(RewardManagerBase):
    """``config``: the trainer's typed config (its reward_model keys are the defaults of the keyword arguments)."""

    compute_score_params = ("data_source", "solution_str", "ground_truth", "extra_info")

    def __init__(self, config: Any = None, tokenizer: Any = None, compute_score: Any = None,
                 reward_router_address: str | None = None, reward_model_tokenizer: Any = None, *,
                 num_examine: int = 0, reward_fn_key: str = "data_source", max_concurrent: int | None = None,
                 max_rpm: float | None = None, max_tpm: float | None = None,
                 estimated_tokens_per_request: float | None = None, timeout: float | None = None,
                 on_timeout: str | None = None, **reward_kwargs: Any) -> None:
        if tokenizer is None:
            raise TypeError("RateLimitedRewardManager needs the policy's tokenizer (tokenizer=...)")
        super().__init__(config, tokenizer)
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.num_examine = num_examine
        self.reward_kwargs = reward_kwargs
        if reward_router_address is not None:
            self.reward_kwargs.update(reward_router_address=reward_router_address,
                                      reward_model_tokenizer=reward_model_tokenizer)
        given = {"max_concurrent": max_concurrent, "max_rpm": max_rpm, "max_tpm": max_tpm,
                 "estimated_tokens_per_request": estimated_tokens_per_request, "timeout": timeout}
        limits = {k: v if v is not None else _from_config(config, k) for k, v in given.items()}
        self.limits = RateLimits(limits["max_concurrent"], limits["max_rpm"], limits["max_tpm"],
                                 limits["estimated_tokens_per_request"] or 2000)
        scoring = getattr(getattr(config, "reward_model", None), "scoring", None)
        if limits["timeout"] is None and scoring is not None:
            limits["timeout"] = scoring.timeout
        self.timeout = float(limits["timeout"]) if limits["timeout"] else None
        self.on_timeout = on_timeout or (scoring.on_timeout if scoring is not None else "zero")

    @property
    def is_async(self) -> bool:
        fn = self.compute_score
        while isinstance(fn, functools.partial):
            fn = fn.func
        return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)

    async def _call(self, **kwargs: Any) -> Any:
        if self.is_async:
            return await self.compute_score(**kwargs, **self.reward_kwargs)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(self.compute_score, **kwargs, **self.reward_kwargs))

    def _inputs(self, data: DataProto) -> dict[str, Any]:
        from verl.workers.reward_manager.batch_text import decode_rollouts

        texts = decode_rollouts(data, self.tokenizer, self.reward_fn_key)
        return {"data_source": texts.data_sources[0], "solution_str": texts.response_strs[0],
                "ground_truth": texts.ground_truths[0], "extra_info": texts.extra_infos[0]}

    async def run_single(self, data: DataProto) -> SampleScore:
        if len(data) != 1:
            raise ValueError(f"run_single scores one sample; got {len(data)} rows")
        inputs = self._inputs(data)
        where = f"sample (data_source={inputs['data_source']!r}) scored by {describe_fn(self.compute_score)}"
        async with self.limits.slot():
            try:
                result = await asyncio.wait_for(self._call(**inputs), timeout=self.timeout)
            except TimeoutError:
                return self._timed_out(where)
            except Exception as err:
                raise RewardScoreError(f"{where} raised {type(err).__name__}: {err}") from err
        score, fields = unpack_score(result, 0, inputs["data_source"], self.compute_score)
        if self.timeout is not None:
            fields[TIMEOUT_FIELD] = False
        return {"reward_score": score, "reward_extra_info": fields}

    def _timed_out(self, where: str) -> SampleScore:
        if self.on_timeout == "error":
            raise RewardTimeoutError(f"{where} did not finish within {self.timeout:g} s (reward_model.timeout, else "
                                     "reward_model.scoring.timeout); the run stops because "
                                     "reward_model.scoring.on_timeout=error")
        print(f"WARNING reward: {where} timed out after {self.timeout:g} s; scored 0 (counted in reward/timeouts)",
              file=sys.stderr, flush=True)
        return {"reward_score": 0.0, "reward_extra_info": {TIMEOUT_FIELD: True}}
