"""The default reward manager: one compute_score call per response."""

from __future__ import annotations

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
    call_score_fn,
    place_scores,
    unpack_score,
)


@register("naive")
class NaiveRewardManager(AbstractRewardManager):
    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: RawRewardFn | None = None,
        reward_fn_key: str = "data_source",
        **kwargs: Any,
    ) -> None:
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        # Extra keyword arguments reach every compute_score call (upstream's reward_kwargs).
        self.reward_kwargs = kwargs

    def _score_row(self, texts: RolloutTexts, i: int) -> tuple[float, dict[str, Any], Any]:
        """(reward, extra fields, raw result) of row i; subclasses adjust the reward here."""
        data_source = texts.data_sources[i]
        result = call_score_fn(
            self.compute_score,
            i,
            data_source,
            solution_str=texts.response_strs[i],
            ground_truth=texts.ground_truths[i],
            extra_info=texts.extra_infos[i],
            **self.reward_kwargs,
        )
        reward, fields = unpack_score(result, i, data_source, self.compute_score)
        return reward, fields, result

    def __call__(self, data: DataProto, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        precomputed = precomputed_scores(data, return_dict)
        if precomputed is not None:
            return precomputed
        texts = decode_rollouts(data, self.tokenizer, self.reward_fn_key)
        printer = ExamplePrinter(self.num_examine)
        extra = ExtraInfoCollector()
        rewards = []
        for i, data_source in enumerate(texts.data_sources):
            reward, fields, result = self._score_row(texts, i)
            rewards.append(reward)
            extra.add(fields)
            printer.maybe_print(data_source, texts.prompt_strs[i], texts.response_strs[i], texts.ground_truths[i], result)
        responses = data.batch["responses"]
        reward_tensor = place_scores(rewards, texts.valid_response_lengths, responses.shape[-1], responses.device)
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": extra.result(len(rewards))}
        return reward_tensor
