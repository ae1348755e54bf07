"""Judge prompts and verdicts as text: the one implementation every generative judge here uses.

Two callers share it: the reward loop's HTTP judge (``verl.workers.reward_loop.judge.OpenAIJudge``) and upstream's
generative-reward-model helpers (``verl.utils.reward_process.reward_preprocess`` / ``reward_postprocess``).

- ``fill_judge_template`` fills a prompt template's fields ``{question}``, ``{response}``, ``{ground_truth}``
  (empty when None), ``{positive}`` and ``{negative}``; a template uses the ones it needs.
- ``judge_chat`` turns a template into the chat sent to the judge: an optional system message, then the user message.
- ``last_boxed_score`` reads the last ``\\boxed{n}`` (n a non-negative integer) of a judge's answer.
- ``BOXED_JUDGE_SYSTEM_PROMPT`` / ``BOXED_JUDGE_TEMPLATE``: upstream's generative-reward-model prompt layout (the
  response and the reference in tags, a 0..``BOXED_MAX_SCORE`` rating asked for in ``\\boxed{}``).

Standard library only, so importing the reward loop's judge does not pull in torch.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["BOXED_JUDGE_SYSTEM_PROMPT", "BOXED_JUDGE_TEMPLATE", "BOXED_MAX_SCORE", "fill_judge_template",
           "judge_chat", "last_boxed_score"]

BOXED_MAX_SCORE = 5.0

BOXED_JUDGE_SYSTEM_PROMPT = (
    "You are a careful grader of math solutions. You compare a student's solution with a reference solution "
    "and rate how correct it is."
)

# Upstream's prompt leaves the question out (the reference carries what the grade needs); a template that wants
# it may use {question}. Doubled braces are str.format's literal braces.
BOXED_JUDGE_TEMPLATE = (
    "<response> \n {response} \n </response>\n\n"
    "<ground_truth> \n {ground_truth} \n </ground_truth>\n\n"
    "Compare the meaning of the response with the ground truth, and check the reasoning and the arithmetic of the "
    "response.\n"
    "Rate the response from 0 (wrong) to 5 (fully correct).\n"
    "Answer as briefly as you can: a single integer inside \\boxed{{}}, for example \\boxed{{5}}."
)

# Digits only, as upstream reads it: a sign or a decimal point is no score (a negative rating is not on the scale).
_BOXED = re.compile(r"\\boxed\{(\d+)\}")


def fill_judge_template(template: str, question: str, response: str, ground_truth: Any = None, *,
                        positive: str = "", negative: str = "") -> str:
    """``template`` with its fields filled; a field the template does not name is left out of the text."""
    return template.format(question=question, response=response, positive=positive, negative=negative,
                           ground_truth="" if ground_truth is None else ground_truth)


def judge_chat(template: str, question: str, response: str, ground_truth: Any = None, *,
               system_prompt: str | None = None, positive: str = "", negative: str = "") -> list[dict[str, str]]:
    """The judge's chat: ``[system (when system_prompt is set), user (the filled template)]``."""
    user = fill_judge_template(template, question, response, ground_truth, positive=positive, negative=negative)
    chat = [] if system_prompt is None else [{"role": "system", "content": system_prompt}]
    chat.append({"role": "user", "content": user})
    return chat


def last_boxed_score(text: str | None) -> float | None:
    """The last ``\\boxed{n}`` of ``text`` as a float (a judge may box a draft before its final rating), or None
    when there is none with a non-negative integer inside."""
    found = _BOXED.findall(text or "")
    return float(found[-1]) if found else None
