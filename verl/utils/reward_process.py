"""Upstream's generative-reward-model helpers: the judge's prompt from a sample, and a score from the judge's answer.

- ``reward_preprocess(questions, answers, ground_truths)`` -> ``(chats, extra_scores)``: one judge chat per sample
  (a system message and the response and reference in ``BOXED_JUDGE_TEMPLATE``), and a (n,) float32 tensor of a
  rule score per sample (``compute_score(answer, ground_truth)``, GSM8K's exact match by default), which
  ``reward_postprocess`` can blend in.
- ``reward_postprocess(gen_rm_responses, scores_tensor=None)`` -> (n,) float32: the last ``\\boxed{n}`` of each
  answer, clamped to 0..5; an answer without one scores 0 (logged as a warning). With ``scores_tensor`` (the rule
  scores in 0..1) the result is ``(judge + 5 * rule) / 2``.

The prompt building and the ``\\boxed{}`` reading are ``verl.utils.judge_text``'s, which the reward loop's HTTP judge
uses too: ``OpenAIJudge(url, prompt_template=BOXED_JUDGE_TEMPLATE, system_prompt=BOXED_JUDGE_SYSTEM_PROMPT,
max_score=5)`` asks an endpoint with the same prompt and reads the same verdict (docs/reward_loop.md).
"""

from __future__ import annotations

import logging

import torch

from verl.utils.judge_text import (
    BOXED_JUDGE_SYSTEM_PROMPT,
    BOXED_JUDGE_TEMPLATE,
    BOXED_MAX_SCORE,
    judge_chat,
    last_boxed_score,
)
from verl.utils.reward_score.gsm8k import compute_score  # a global looked up per call, so it can be replaced

__all__ = ["reward_postprocess", "reward_preprocess"]

logger = logging.getLogger(__name__)


def reward_preprocess(questions: list[str], answers: list[str], ground_truths: list[str], *,
                      template: str = BOXED_JUDGE_TEMPLATE, system_prompt: str | None = BOXED_JUDGE_SYSTEM_PROMPT,
                      ) -> tuple[list[list[dict[str, str]]], torch.Tensor]:
    """Judge chats and rule scores for the samples, paired as ``zip`` pairs them (the shortest list decides, as
    upstream's does). ``template`` fills ``{question}``, ``{response}`` (the answer) and ``{ground_truth}``;
    ``system_prompt=None`` sends the user message alone."""
    chats: list[list[dict[str, str]]] = []
    extra_scores: list[float] = []
    for question, answer, ground_truth in zip(questions, answers, ground_truths):
        chats.append(judge_chat(template, question, answer, ground_truth, system_prompt=system_prompt))
        extra_scores.append(float(compute_score(answer, ground_truth)))
    return chats, torch.tensor(extra_scores, dtype=torch.float32)


def reward_postprocess(gen_rm_responses: list[str], scores_tensor: torch.Tensor | None = None) -> torch.Tensor:
    """(n,) float32 scores from the judge's answers, blended with ``scores_tensor`` (n,) when given (see the module
    docstring); the result is on ``scores_tensor``'s device."""
    scores = []
    for text in gen_rm_responses:
        score = last_boxed_score(text)
        if score is None:
            # upstream scores an unreadable answer 0 rather than failing the whole batch
            logger.warning("no \\boxed{<non-negative integer>} in the judge's answer %r; scoring it 0", text[:200])
            score = 0.0
        scores.append(min(max(score, 0.0), BOXED_MAX_SCORE))
    rm_scores = torch.tensor(scores, dtype=torch.float32)
    if scores_tensor is not None:
        rm_scores = (rm_scores.to(scores_tensor.device) + scores_tensor * BOXED_MAX_SCORE) / 2
    return rm_scores
