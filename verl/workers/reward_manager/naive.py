"""The default reward manager: one compute_score call per response, each with a time limit."""

from __future__ import annotations

from typing import Any

import torch

from verl.protocol import DataProto
from verl.rewards import default_compute_score
from verl.workers.reward_manager.abstract import AbstractRewardManager, RawRewardFn, precomputed_scores
from verl.workers.reward_manager.batch_text import RolloutTexts, decode_rollouts
from verl.workers.reward_manager.registry import register
from verl.workers.reward_manager.scoring import ExamplePrinter, place_scores, unpack_score
from verl.workers.reward_manager.timed_scoring import (
    DEFAULT_TIMEOUT,
    TIMED_OUT,
    TimedScorer,
    sample_label,
    scoring_kwargs_from_config,
    timed_extra_info,
)


@register("naive")
class NaiveRewardManager(AbstractRewardManager):
    """timeout (seconds per sample; None or 0: in this process, unlimited), on_timeout ("zero" | "error") and
    num_processes (None: one per CPU core) are reward_model.scoring's keys (docs/reliability.md#reward)."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int,
        compute_score: RawRewardFn | None = None,
        reward_fn_key: str = "data_source",
        timeout: float | None = DEFAULT_TIMEOUT,
        on_timeout: str = "zero",
        num_processes: int | None = None,
        return_dict: bool = False,
        **kwargs: Any,
    ) -> None:
        # return_dict is the manager's own switch (what a bare `manager(data)` returns), taken here so it never
        # reaches compute_score with the other keyword arguments
        self.return_dict = bool(return_dict)
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        # Extra keyword arguments reach every compute_score call (upstream's reward_kwargs).
        self.reward_kwargs = kwargs
        self.scorer = TimedScorer(self.compute_score, timeout, on_timeout, num_processes)

    @classmethod
    def kwargs_from_config(cls, config: Any) -> dict[str, Any]:
        return scoring_kwargs_from_config(config)

    def close(self) -> None:
        self.scorer.close()

    def _calls(self, texts: RolloutTexts) -> list[dict[str, Any]]:
        return [
            {
                "data_source": texts.data_sources[i],
                "solution_str": texts.response_strs[i],
                "ground_truth": texts.ground_truths[i],
                "extra_info": texts.extra_infos[i],
                **self.reward_kwargs,
            }
            for i in range(len(texts.response_strs))
        ]

    def _score_row(self, texts: RolloutTexts, i: int, result: Any) -> tuple[float, dict[str, Any]]:
        """(reward, extra fields) of row i from compute_score's result; subclasses adjust the reward here."""
        return unpack_score(result, i, texts.data_sources[i], self.compute_score)

    def _raw_results(self, texts: RolloutTexts) -> list[Any]:
        labels = [sample_label(i, source, self.compute_score) for i, source in enumerate(texts.data_sources)]
        return self.scorer.run(self._calls(texts), labels)

    def __call__(self, data: DataProto, return_dict: bool | None = None) -> torch.Tensor | dict[str, Any]:
        if return_dict is None:
            return_dict = self.return_dict
        precomputed = precomputed_scores(data, return_dict)
        if precomputed is not None:
            return precomputed
        texts = decode_rollouts(data, self.tokenizer, self.reward_fn_key)
        results = self._raw_results(texts)
        printer = ExamplePrinter(self.num_examine)
        rewards: list[float] = []
        row_fields: list[dict[str, Any] | None] = []
        for i, result in enumerate(results):
            reward, fields = (0.0, None) if result is TIMED_OUT else self._score_row(texts, i, result)
            rewards.append(reward)
            row_fields.append(fields)
            printer.maybe_print(texts.data_sources[i], texts.prompt_strs[i], texts.response_strs[i],
                                texts.ground_truths[i], result)
        responses = data.batch["responses"]
        reward_tensor = place_scores(rewards, texts.valid_response_lengths, responses.shape[-1], responses.device)
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": timed_extra_info(row_fields, results, self.scorer.limited)}
        return reward_tensor
