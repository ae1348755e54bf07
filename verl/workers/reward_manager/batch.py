"""Reward manager that scores the whole batch in one call (for scorers that batch, e.g. a remote judge)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from verl.protocol import DataProto
from verl.workers.reward_manager.abstract import AbstractRewardManager, RawRewardFn, precomputed_scores
from verl.workers.reward_manager.batch_text import decode_rollouts
from verl.workers.reward_manager.registry import register
from verl.workers.reward_manager.scoring import (
    ExamplePrinter,
    RewardScoreError,
    describe_fn,
    place_scores,
    unpack_score,
)
from verl.workers.reward_manager.timed_scoring import (
    DEFAULT_TIMEOUT,
    TIMED_OUT,
    TimedScorer,
    scoring_kwargs_from_config,
    timed_extra_info,
)


@register("batch")
class BatchRewardManager(AbstractRewardManager):
    """compute_score(data_sources=[...], solution_strs=[...], ground_truths=[...], extra_infos=[...]) -> list."""

    compute_score_params = ("data_sources", "solution_strs", "ground_truths", "extra_infos")

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: RawRewardFn | None = None,
        reward_fn_key: str = "data_source",
        timeout: float | None = DEFAULT_TIMEOUT,
        on_timeout: str = "zero",
        num_processes: int | None = None,
        **reward_kwargs: Any,
    ) -> None:
        if compute_score is None:
            raise ValueError(
                "reward_model.reward_manager=batch needs a batched scoring function: set custom_reward_function.path "
                "to a file whose function takes data_sources, solution_strs, ground_truths, extra_infos"
            )
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score
        self.reward_fn_key = reward_fn_key
        self.reward_kwargs = reward_kwargs
        # the deadline covers the one batched call; num_processes is accepted for the shared config and unused
        self.scorer = TimedScorer(compute_score, timeout, on_timeout, 1)

    @classmethod
    def kwargs_from_config(cls, config: Any) -> dict[str, Any]:
        return scoring_kwargs_from_config(config)

    def close(self) -> None:
        self.scorer.close()

    def verify(self, data: DataProto) -> list[Any]:
        """The raw per-sample results of the one batched call."""
        texts = decode_rollouts(data, self.tokenizer, self.reward_fn_key)
        return self._score(texts)

    def _score(self, texts: Any) -> list[Any]:
        """Per-sample raw results, or TIMED_OUT for every sample when the batched call ran out of time."""
        call = {
            "data_sources": texts.data_sources,
            "solution_strs": texts.response_strs,
            "ground_truths": texts.ground_truths,
            "extra_infos": texts.extra_infos,
            **self.reward_kwargs,
        }
        sources = sorted({str(source) for source in texts.data_sources})
        label = (f"batched compute_score {describe_fn(self.compute_score)} over {len(texts.response_strs)} samples "
                 f"(data_sources {sources}; indices 0-{len(texts.response_strs) - 1})")
        (results,) = self.scorer.run([call], [label])
        if results is TIMED_OUT:
            return [TIMED_OUT] * len(texts.response_strs)
        if not isinstance(results, Sequence | torch.Tensor) or isinstance(results, str | bytes):
            raise RewardScoreError(
                f"batched compute_score {describe_fn(self.compute_score)} returned {type(results).__name__}; "
                "it must return a list with one score per sample"
            )
        if len(results) != len(texts.response_strs):
            raise RewardScoreError(
                f"batched compute_score {describe_fn(self.compute_score)} returned {len(results)} scores "
                f"for {len(texts.response_strs)} samples"
            )
        return list(results)

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        precomputed = precomputed_scores(data, return_dict)
        if precomputed is not None:
            return precomputed
        texts = decode_rollouts(data, self.tokenizer, self.reward_fn_key)
        results = self._score(texts)
        printer = ExamplePrinter(self.num_examine)
        rewards, row_fields = [], []
        for i, (data_source, result) in enumerate(zip(texts.data_sources, results)):
            reward, fields = (0.0, None) if result is TIMED_OUT else unpack_score(result, i, data_source,
                                                                                   self.compute_score)
            rewards.append(reward)
            row_fields.append(fields)
            printer.maybe_print(data_source, texts.prompt_strs[i], texts.response_strs[i], texts.ground_truths[i], result)
        responses = data.batch["responses"]
        reward_tensor = place_scores(rewards, texts.valid_response_lengths, responses.shape[-1], responses.device)
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": timed_extra_info(row_fields, results, self.scorer.limited)}
        return reward_tensor
