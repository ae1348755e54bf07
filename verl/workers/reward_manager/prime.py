"""Reward manager that scores responses in parallel worker processes with a time limit.

For slow or hang-prone verifiers (code execution, heavy symbolic checks): a response whose scoring exceeds
`timeout` seconds gets reward 0 and is counted in a printed warning; any other failure is raised.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from typing import Any

import torch

from verl.protocol import DataProto
from verl.rewards import default_compute_score
from verl.workers.reward_manager.abstract import AbstractRewardManager, RawRewardFn, precomputed_scores
from verl.workers.reward_manager.batch_text import RolloutTexts, decode_rollouts
from verl.workers.reward_manager.registry import register
from verl.workers.reward_manager.scoring import (
    ExamplePrinter,
    ExtraInfoCollector,
    RewardScoreError,
    describe_fn,
    place_scores,
    unpack_score,
)

# Set before the pool forks, so children inherit the scoring function instead of unpickling it.
_WORKER_SCORE_FN: RawRewardFn | None = None


def _score_in_worker(kwargs: dict[str, Any]) -> Any:
    return _WORKER_SCORE_FN(**kwargs)


def _pool_context() -> multiprocessing.context.BaseContext:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


@register("prime")
class PrimeRewardManager(AbstractRewardManager):
    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: RawRewardFn | None = None,
        reward_fn_key: str = "data_source",
        num_processes: int = 64,
        timeout: float = 300.0,
        **reward_kwargs: Any,
    ) -> None:
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.num_processes = num_processes
        self.timeout = timeout
        self.reward_kwargs = reward_kwargs

    def _row_kwargs(self, texts: RolloutTexts, i: int) -> dict[str, Any]:
        return {
            "data_source": texts.data_sources[i],
            "solution_str": texts.response_strs[i],
            "ground_truth": texts.ground_truths[i],
            "extra_info": texts.extra_infos[i],
            **self.reward_kwargs,
        }

    def verify(self, texts: RolloutTexts) -> list[Any]:
        """Raw results in row order; None where scoring timed out."""
        global _WORKER_SCORE_FN
        num_rows = len(texts.response_strs)
        workers = max(1, min(self.num_processes, num_rows, os.cpu_count() or 1))
        _WORKER_SCORE_FN = self.compute_score
        pool = _pool_context().Pool(processes=workers)
        try:
            pending = [pool.apply_async(_score_in_worker, (self._row_kwargs(texts, i),)) for i in range(num_rows)]
            deadline = time.monotonic() + self.timeout
            results: list[Any] = []
            for i, handle in enumerate(pending):
                try:
                    results.append(handle.get(timeout=max(0.0, deadline - time.monotonic())))
                except multiprocessing.TimeoutError:
                    results.append(None)
                except Exception as exc:
                    raise RewardScoreError(
                        f"sample {i} (data_source={texts.data_sources[i]!r}) scored by "
                        f"{describe_fn(self.compute_score)} raised {type(exc).__name__}: {exc}"
                    ) from exc
        finally:
            # terminate, not close: a verifier stuck past the deadline must not outlive the step.
            pool.terminate()
            pool.join()
            _WORKER_SCORE_FN = None
        return results

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        precomputed = precomputed_scores(data, return_dict)
        if precomputed is not None:
            return precomputed
        texts = decode_rollouts(data, self.tokenizer, self.reward_fn_key)
        results = self.verify(texts)
        timed_out = sum(result is None for result in results)
        if timed_out:
            print(f"[PrimeRewardManager] {timed_out} of {len(results)} samples timed out after {self.timeout}s; "
                  "they get reward 0")
        printer = ExamplePrinter(self.num_examine)
        extra = ExtraInfoCollector()
        rewards = []
        for i, result in enumerate(results):
            data_source = texts.data_sources[i]
            reward, fields = (0.0, {}) if result is None else unpack_score(result, i, data_source, self.compute_score)
            rewards.append(reward)
            extra.add(fields)
            printer.maybe_print(data_source, texts.prompt_strs[i], texts.response_strs[i], texts.ground_truths[i], result)
        responses = data.batch["responses"]
        reward_tensor = place_scores(rewards, texts.valid_response_lengths, responses.shape[-1], responses.device)
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": extra.result(len(rewards))}
        return reward_tensor
