"""An LLM judge behind an OpenAI-compatible HTTP endpoint (``POST {base_url}/chat/completions``).

``OpenAIJudge(base_url, model)`` fills a judge prompt template with the question, the response and the reference,
asks the endpoint, and reads a score from the answer with ``parse_verdict``. Each attempt has a timeout
(``request_timeout``); connection failures, timeouts, HTTP 429 and 5xx are retried ``max_retries`` times with
exponential backoff; other 4xx are not. Failures raise ``JudgeError`` subclasses that name the endpoint:

- ``JudgeUnavailableError``: the endpoint could not be reached or kept failing (down, refusing, 5xx);
- ``JudgeResponseError``: it answered, but not an OpenAI chat completion, or without a verdict in the text.

The prompt is built and a ``\\boxed{n}`` verdict is read by ``verl.utils.judge_text``, which upstream's
generative-reward-model helpers (``verl.utils.reward_process``) share: ``system_prompt`` adds a system message, and
``prompt_template=BOXED_JUDGE_TEMPLATE, system_prompt=BOXED_JUDGE_SYSTEM_PROMPT, max_score=5`` asks with their prompt.

The verdict from the probability of a verdict token: ``OpenAIJudge(..., verdict_tokens=("Yes", "No"))`` asks for one
token with ``logprobs: true, top_logprobs: 20`` (prompt ``VERDICT_TOKEN_TEMPLATE`` unless ``prompt_template`` is
given) and scores ``p(positive) / (p(positive) + p(negative))``, each ``p`` summed over the top tokens equal to that
verdict once whitespace is stripped and case folded (``Yes``, `` yes``, ``YES``). ``verdict_probability`` is that
rule on one token's ``top_logprobs``.

``judge_compute_score`` is the custom reward function form (``async``): point ``custom_reward_function.path`` at a
file that calls it (examples/reward_loop/llm_judge.py) and pair it with ``reward_model.reward_manager=rate_limited``
for rate limits and a per-sample deadline. HTTP goes through the standard library on a thread, so nothing beyond
Python is needed.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from verl.utils.judge_text import fill_judge_template, judge_chat, last_boxed_score

__all__ = ["DEFAULT_JUDGE_TEMPLATE", "VERDICT_TOKEN_TEMPLATE", "JudgeError", "JudgeResponseError",
           "JudgeUnavailableError", "JudgeVerdict", "OpenAIJudge", "judge_compute_score", "parse_verdict",
           "verdict_probability"]

DEFAULT_JUDGE_TEMPLATE = (
    "You are grading a response to a question.\n\n"
    "Question:\n{question}\n\n"
    "Reference answer:\n{ground_truth}\n\n"
    "Response to grade:\n{response}\n\n"
    "Reason briefly, then end with one line `SCORE: <number from 0 to 10>`."
)

# For verdict_tokens: the answer is one token, so the prompt ends asking for exactly one word.
VERDICT_TOKEN_TEMPLATE = (
    "You are grading a response to a question.\n\n"
    "Question:\n{question}\n\n"
    "Reference answer:\n{ground_truth}\n\n"
    "Response to grade:\n{response}\n\n"
    "Is the response correct? Answer with one word, {positive} or {negative}."
)
VERDICT_TOP_LOGPROBS = 20  # OpenAI's largest top_logprobs

_SCORE = re.compile(r"score\s*[:=]\s*(-?\d+(?:\.\d+)?)(?:\s*/\s*(\d+(?:\.\d+)?))?", re.IGNORECASE)
_VERDICT = re.compile(r"verdict\s*[:=]\s*\**\s*(correct|incorrect|yes|no|pass|fail)\b", re.IGNORECASE)
_POSITIVE = {"correct", "yes", "pass"}


class JudgeError(RuntimeError):
    """The judge could not give a score; the message names the endpoint."""


class JudgeUnavailableError(JudgeError):
    """The endpoint could not be reached, or kept failing, after every retry."""


class JudgeResponseError(JudgeError):
    """The endpoint answered with something that is not a usable verdict."""


@dataclass
class JudgeVerdict:
    score: float
    text: str


def parse_verdict(text: str, max_score: float = 10.0) -> float:
    """A score in [0, 1] from the judge's text: the last ``SCORE: x`` (or ``SCORE: x/y``) divided by its scale
    (``max_score`` when no ``/y``), else the last ``VERDICT: correct|incorrect|yes|no|pass|fail`` as 1 or 0, else
    the last ``\\boxed{n}`` divided by ``max_score``. Raises ValueError when there is none of them, or the score
    lies outside its scale."""
    scores = _SCORE.findall(text or "")
    if scores:
        value, scale = scores[-1]
        top = float(scale) if scale else float(max_score)
        score = float(value)
        if top <= 0 or not 0 <= score <= top:
            raise ValueError(f"the judge's score {score:g} is outside 0..{top:g}")
        return score / top
    verdicts = _VERDICT.findall(text or "")
    if verdicts:
        return 1.0 if verdicts[-1].lower() in _POSITIVE else 0.0
    boxed = last_boxed_score(text)
    if boxed is not None:
        if max_score <= 0 or boxed > max_score:
            raise ValueError(f"the judge's score \\boxed{{{boxed:g}}} is outside 0..{max_score:g}")
        return boxed / max_score
    raise ValueError("no 'SCORE: <number>', 'VERDICT: correct|incorrect' or '\\boxed{<integer>}' in the judge's "
                     "answer")


def verdict_probability(top_logprobs: list[dict[str, Any]], positive: str, negative: str) -> float:
    """``p(positive) / (p(positive) + p(negative))`` over one token's OpenAI ``top_logprobs`` entries
    (``{"token", "logprob"}``), each ``p`` summed over the entries whose token, stripped of whitespace and case
    folded, equals the verdict's. Raises ValueError when neither verdict is among them."""
    want = {positive.strip().casefold(): 0, negative.strip().casefold(): 1}
    mass = [0.0, 0.0]
    for entry in top_logprobs:
        side = want.get(str(entry["token"]).strip().casefold())
        if side is not None:
            mass[side] += math.exp(float(entry["logprob"]))
    if mass[0] + mass[1] <= 0.0:
        raise ValueError(f"neither verdict token {positive!r} nor {negative!r} is among the answer's "
                         f"{len(top_logprobs)} top_logprobs ({[e.get('token') for e in top_logprobs][:20]!r})")
    return mass[0] / (mass[0] + mass[1])


class OpenAIJudge:
    """``verdict_tokens``: None (default) reads the score from the answer's text (``parse_verdict``);
    ``(positive, negative)`` scores from the first answer token's probabilities (``verdict_probability``), asking
    for ``max_tokens=1, logprobs=true, top_logprobs=20``; its default prompt is ``VERDICT_TOKEN_TEMPLATE``.
    ``system_prompt``: a system message sent before the filled template (None: the user message alone)."""

    def __init__(self, base_url: str, model: str | None = None, *, api_key: str | None = None,
                 prompt_template: str | None = None, max_score: float = 10.0,
                 request_timeout: float = 60.0, max_retries: int = 3, backoff_s: float = 0.5,
                 temperature: float = 0.0, max_tokens: int = 512, verdict_tokens: Any = None,
                 system_prompt: str | None = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"judge base_url must start with http:// or https://, got {base_url!r}")
        if verdict_tokens is not None:
            verdict_tokens = tuple(str(token) for token in verdict_tokens)
            folded = {token.strip().casefold() for token in verdict_tokens}
            if len(verdict_tokens) != 2 or len(folded) != 2 or "" in folded:
                raise ValueError(f"judge verdict_tokens must be two different non-blank words (positive, negative), "
                                 f"got {verdict_tokens!r}")
        self.verdict_tokens: tuple[str, str] | None = verdict_tokens
        if prompt_template is None:
            prompt_template = DEFAULT_JUDGE_TEMPLATE if verdict_tokens is None else VERDICT_TOKEN_TEMPLATE
        if max_retries < 0 or request_timeout <= 0:
            raise ValueError("judge max_retries must be >= 0 and request_timeout > 0 seconds")
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.model = model
        self.api_key = api_key
        self.prompt_template = prompt_template
        self.system_prompt = system_prompt
        self.max_score = max_score
        self.request_timeout = float(request_timeout)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.temperature = temperature
        self.max_tokens = max_tokens

    def prompt(self, question: str, response: str, ground_truth: Any = None) -> str:
        positive, negative = self.verdict_tokens or ("", "")
        return fill_judge_template(self.prompt_template, question, response, ground_truth, positive=positive,
                                   negative=negative)

    def messages(self, question: str, response: str, ground_truth: Any = None) -> list[dict[str, str]]:
        """The chat sent to the endpoint: the system prompt (when set) and the filled template."""
        positive, negative = self.verdict_tokens or ("", "")
        return judge_chat(self.prompt_template, question, response, ground_truth, system_prompt=self.system_prompt,
                          positive=positive, negative=negative)

    async def judge(self, question: str, response: str, ground_truth: Any = None) -> JudgeVerdict:
        messages = self.messages(question, response, ground_truth)
        if self.verdict_tokens is not None:
            return await self._judge_by_probability(messages)
        text = await self.complete(messages)
        try:
            return JudgeVerdict(parse_verdict(text, self.max_score), text)
        except ValueError as err:
            raise JudgeResponseError(f"judge at {self.url} (model {self.model!r}): {err}; it answered "
                                     f"{text[:200]!r}") from None

    async def _judge_by_probability(self, messages: list[dict[str, str]]) -> JudgeVerdict:
        reply = await self.ask(messages, max_tokens=1, logprobs=True, top_logprobs=VERDICT_TOP_LOGPROBS)
        text = self._content(reply)
        try:
            tops = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            if not isinstance(tops, list):
                raise TypeError(type(tops).__name__)
        except (KeyError, IndexError, TypeError):
            raise JudgeResponseError(f"judge at {self.url} (model {self.model!r}) answered without "
                                     f"choices[0].logprobs.content[0].top_logprobs (does it serve logprobs?): "
                                     f"{str(reply.get('choices') if isinstance(reply, dict) else reply)[:200]!r}") \
                from None
        try:
            return JudgeVerdict(verdict_probability(tops, *self.verdict_tokens), text)
        except (ValueError, KeyError, TypeError) as err:
            raise JudgeResponseError(f"judge at {self.url} (model {self.model!r}): {err}; it answered "
                                     f"{text[:200]!r}") from None

    async def complete(self, messages: list[dict[str, str]]) -> str:
        """The assistant text of one chat completion, with the retries and errors of the module docstring."""
        return self._content(await self.ask(messages))

    async def ask(self, messages: list[dict[str, str]], **fields: Any) -> dict:
        """One chat completion's decoded reply (``fields`` join the request body), with the retries and errors of
        the module docstring."""
        body = {"messages": messages, "temperature": self.temperature, "max_tokens": self.max_tokens, **fields}
        if self.model is not None:  # None: the server's own model (one judge engine serves one)
            body["model"] = self.model
        return await self.post(body)

    async def post(self, body: dict, path: str | None = None) -> dict:
        """POST ``body`` to the chat endpoint (or to ``base_url/path``) with the retries and errors of the module
        docstring; the decoded JSON answer."""
        url = self.url if path is None else f"{self.base_url}/{path.lstrip('/')}"
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1))
            outcome = await asyncio.to_thread(self._post, body, url)
            if isinstance(outcome, str):
                last = outcome
                continue
            return outcome
        raise JudgeUnavailableError(f"judge at {url} (model {self.model!r}) failed {self.max_retries + 1} "
                                    f"attempts; last: {last}. Is the endpoint up (reward kwargs base_url)?")

    def _post(self, body: dict, url: str | None = None) -> dict | str:
        """The decoded JSON answer, or a string saying why this attempt failed and may be retried."""
        url = url or self.url
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout) as reply:
                raw = reply.read()
        except urllib.error.HTTPError as err:
            if err.code == 429 or err.code >= 500:
                return f"HTTP {err.code} {err.reason}"
            raise JudgeResponseError(f"judge at {url} refused the request: HTTP {err.code} {err.reason} "
                                     f"({err.read()[:200]!r})") from None
        except TimeoutError:
            return f"no answer within {self.request_timeout:g} s"
        except (urllib.error.URLError, ConnectionError, OSError) as err:
            reason = getattr(err, "reason", err)
            return f"{type(reason).__name__}: {reason}"
        try:
            return json.loads(raw)
        except ValueError:
            raise JudgeResponseError(f"judge at {url} answered with something that is not JSON: "
                                     f"{raw[:200]!r}") from None

    def _content(self, reply: Any) -> str:
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise JudgeResponseError(f"judge at {self.url} answered without choices[0].message.content: "
                                     f"{str(reply)[:200]!r}") from None
        if not isinstance(content, str):
            raise JudgeResponseError(f"judge at {self.url} answered with content of type {type(content).__name__}")
        return content


_JUDGES: dict[tuple, OpenAIJudge] = {}


async def judge_compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None,
                              *, base_url: str | None = None, model: str | None = None, question_key: str = "question",
                              reward_router_address: str | None = None, reward_model_tokenizer: Any = None,
                              **judge_kwargs: Any) -> dict[str, Any]:
    """A reward function scored by an OpenAI-compatible judge: ``{"score": verdict in [0, 1]}``. The question is
    ``extra_info[question_key]`` (empty when absent); ``judge_kwargs`` go to ``OpenAIJudge``, e.g.
    ``verdict_tokens=[Yes,No]`` (``+custom_reward_function.reward_kwargs.verdict_tokens=[Yes,No]``) for the score
    from the verdict token's probability.

    The judge is ``base_url``, else the trainer's own judge engine (``reward_model.rollout.name``), whose
    ``host:port`` comes as ``reward_router_address`` (upstream's argument; ``reward_model_tokenizer`` is not needed:
    the server applies the judge's chat template)."""
    if base_url is None:
        if reward_router_address is None:
            raise JudgeUnavailableError("no judge to ask: pass base_url (reward kwargs) or serve one with "
                                        "reward_model.rollout.name=hf|vllm (reward_router_address)")
        base_url = f"http://{reward_router_address}/v1"
    key = (base_url, model, tuple(sorted((k, repr(v)) for k, v in judge_kwargs.items())))
    judge = _JUDGES.get(key)
    if judge is None:
        judge = _JUDGES.setdefault(key, OpenAIJudge(base_url, model, **judge_kwargs))
    question = (extra_info or {}).get(question_key, "")
    verdict = await judge.judge(str(question), solution_str, ground_truth)
    return {"score": verdict.score}
