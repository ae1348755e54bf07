"""An OpenAI-compatible chat endpoint in front of one rollout engine (a generative reward model's judge server).

``ChatCompletionServer`` answers ``POST /v1/chat/completions`` (also ``/chat/completions``), ``GET /v1/models`` and
``GET /health`` on a loopback port, and ``GET /metrics`` with its counters (JSON). Every request is rendered with the
model's chat template, tokenized, and submitted to an ``EngineLoop`` (verl.workers.rollout.agent_loop.server): the
same queue and engine backends the agent loop drives, so requests that wait at the same time are generated as one
batch (HF generate) or join vLLM's continuous batch. The engine runs on its own thread; the HTTP server handles each
connection on a thread of its own, so many judges can ask at once.

Request fields honoured: ``messages``, ``model`` (absent, or one of the served names), ``max_tokens`` /
``max_completion_tokens`` (clipped to ``response_length`` and to what is left of ``prompt_length +
response_length``), ``temperature`` (0: greedy), ``top_p``, ``top_k``, ``seed``, ``n`` (1 only),
``chat_template_kwargs``, ``logprobs`` / ``top_logprobs`` (below). Fields that would change the answer and are not
built (``stream``, ``stop``, ``tools``, ``response_format``, penalties, ``logit_bias``) are answered with HTTP 400
naming the field, never ignored.

Log-probs (OpenAI's chat format): ``logprobs: true`` with ``top_logprobs: k`` (0..20; ``k > 0`` needs
``logprobs: true``) answers ``choices[0].logprobs.content``, one entry per generated token:
``{"token", "logprob", "bytes", "top_logprobs": [k x {"token", "logprob", "bytes"}, most likely first]}``. The
values are those vLLM's OpenAI server reports by default (its ``logprobs_mode="raw_logprobs"``): the log-softmax of
the model's raw logits at each generated position, before temperature, top-k/top-p or any other processing, so
they do not depend on the sampling settings. ``token`` is the token decoded alone, ``bytes`` its UTF-8 bytes. Only
an engine backend that reports them (``reports_top_logprobs``: the HF and vLLM judge backends) takes such requests;
others answer HTTP 400 naming the engine.

Sleep (a judge colocated on the actor's GPUs, ``reward_model.enable_resource_pool=false``): ``sleep()`` stops
taking requests, waits for those in flight, then has the backend free its device memory (``backend.sleep()``);
until ``wake_up()`` restores it, every chat request is answered HTTP 503 naming the sleep, and ``/health`` reports
``asleep``.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from verl.utils.json_http import json_reply as _reply
from verl.utils.json_http import read_json
from verl.workers.rollout.agent_loop.server import EngineLoop, TokenOutput

__all__ = ["MAX_TOP_LOGPROBS", "ChatCompletionServer", "ChatRequestError", "ScoredTokenOutput"]

MAX_TOP_LOGPROBS = 20  # OpenAI's bound on top_logprobs
_NOT_BUILT = {"stream": False, "stop": None, "tools": None,
              "tool_choice": None, "response_format": None, "presence_penalty": 0, "frequency_penalty": 0,
              "logit_bias": None, "best_of": None, "use_beam_search": False}
_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")


class ChatRequestError(ValueError):
    """A request the server cannot answer as asked (HTTP ``status``)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ScoredTokenOutput(TokenOutput):
    """A backend's answer with log-probs: ``log_probs[t]`` is the generated token's, ``top_logprobs[t]`` the
    ``(token id, log-prob)`` pairs of step t's most likely tokens (most likely first; as many as asked)."""

    top_logprobs: list[list[tuple[int, float]]] | None = None


class ChatCompletionServer:
    """``backend``: an engine backend (``HFBackend``-like or ``VLLMBackend``); ``tokenizer``: the model's, with its
    chat template; ``served_names``: the ``model`` values accepted (the first is reported);
    ``prompt_length`` / ``response_length``: the request budget (reward_model.rollout.*)."""

    def __init__(self, backend: Any, tokenizer: Any, served_names: list[str], prompt_length: int,
                 response_length: int, request_timeout_s: float = 3600.0) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.served_names = [n for n in served_names if n]
        self.prompt_length = int(prompt_length)
        self.response_length = int(response_length)
        self.request_timeout_s = request_timeout_s
        self.engine_loop = EngineLoop(backend)
        self.counters = {"requests": 0, "completed": 0, "failed": 0, "prompt_tokens": 0, "completion_tokens": 0}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._engine_thread: threading.Thread | None = None
        self._engine_error: BaseException | None = None
        self._http: ThreadingHTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._sleep_state = threading.Condition()
        self._asleep = False
        self._active = 0  # chat requests accepted and not yet answered

    # -- life cycle ----------------------------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start the engine and the HTTP server; returns ``host:port`` (upstream's router-address form)."""
        self.start_engine()
        return self.start_http(host, port)

    def start_http(self, host: str = "127.0.0.1", port: int = 0) -> str:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # one line per request would flood the run's log
                return None

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server._handle_get(self)

            def do_POST(self) -> None:  # noqa: N802
                server._handle_post(self)

        self._http = ThreadingHTTPServer((host, port), Handler)
        self._http.daemon_threads = True
        self._http_thread = threading.Thread(target=self._http.serve_forever, name="chat-server-http", daemon=True)
        self._http_thread.start()
        return self.address

    def start_engine(self) -> None:
        """Start stepping the engine (requests submitted before this wait in its queue and form its first batch)."""
        if self._engine_thread is not None:
            return
        self._engine_thread = threading.Thread(target=self._serve_engine, name="chat-server-engine", daemon=True)
        self._engine_thread.start()

    @property
    def address(self) -> str:
        if self._http is None:
            raise RuntimeError("the chat server's HTTP side is not started")
        host, port = self._http.server_address[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        """Finish what is queued, stop the engine thread and the HTTP server (idempotent)."""
        self._stopping.set()
        if self._engine_thread is not None:
            self._engine_thread.join()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counters = dict(self.counters)
        return {**counters, "engine_steps": self.engine_loop.steps, "max_in_flight": self.engine_loop.max_in_flight}

    @property
    def asleep(self) -> bool:
        return self._asleep

    def sleep(self, timeout_s: float | None = None) -> None:
        """Refuse new requests (HTTP 503), wait for the accepted ones to be answered, then free the engine's device
        memory (``backend.sleep()``). Idempotent. ``timeout_s``: how long to wait for requests in flight (default:
        the request timeout); past it the server stays awake and TimeoutError names how many were still running."""
        release = getattr(self.backend, "sleep", None)
        if not callable(release):
            raise RuntimeError(f"the judge engine's backend {type(self.backend).__name__} cannot sleep (no sleep())")
        wait_s = self.request_timeout_s if timeout_s is None else timeout_s
        with self._sleep_state:
            if self._asleep:
                return
            self._asleep = True
            if not self._sleep_state.wait_for(lambda: self._active == 0, timeout=wait_s):
                self._asleep = False
                raise TimeoutError(f"the judge engine could not sleep: {self._active} request(s) still running "
                                   f"after {wait_s:g} s")
            try:
                release()
            except BaseException:
                self._asleep = False
                raise

    def wake_up(self) -> None:
        """Restore what ``sleep()`` freed and take requests again. Idempotent."""
        with self._sleep_state:
            if not self._asleep:
                return
            self.backend.wake_up()
            self._asleep = False

    def _serve_engine(self) -> None:
        try:
            self.engine_loop.serve(self._stopping.is_set)
        except BaseException as err:  # noqa: BLE001 - every later request is answered 503 naming it
            self._engine_error = err

    # -- one request ---------------------------------------------------------------------------------------------

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat completion for one decoded request body (raises ChatRequestError)."""
        prompt_ids, params = self._prepare(body)
        if self._engine_error is not None or self._stopping.is_set():
            raise ChatRequestError(f"the judge engine is not running: {self._engine_error!r}", status=503)
        with self._sleep_state:
            if self._asleep:
                raise ChatRequestError("the judge engine is asleep: it shares the actor's GPU "
                                       "(reward_model.enable_resource_pool=false) and sleeps while the actor trains; "
                                       "ask between generation start and the end of scoring", status=503)
            self._active += 1
        try:
            output = self._generate(prompt_ids, params)
        finally:
            with self._sleep_state:
                self._active -= 1
                self._sleep_state.notify_all()
        text = self.tokenizer.decode(output.token_ids, skip_special_tokens=True)
        logprobs = self._logprobs(output) if "logprobs" in params else None
        with self._lock:
            self.counters["completed"] += 1
            self.counters["prompt_tokens"] += len(prompt_ids)
            self.counters["completion_tokens"] += len(output.token_ids)
        return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                "model": self.served_names[0] if self.served_names else "judge",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": logprobs, "finish_reason": output.stop_reason}],
                "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(output.token_ids),
                          "total_tokens": len(prompt_ids) + len(output.token_ids)}}

    def _generate(self, prompt_ids: list[int], params: dict[str, Any]) -> Any:
        with self._lock:
            self.counters["requests"] += 1
        future = self.engine_loop.submit(f"chat-{uuid.uuid4().hex[:12]}", prompt_ids, params)
        try:
            return future.result(timeout=self.request_timeout_s)
        except Exception as err:
            with self._lock:
                self.counters["failed"] += 1
            raise ChatRequestError(f"generation failed: {type(err).__name__}: {err}", status=500) from err

    def _prepare(self, body: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
        if not isinstance(body, dict):
            raise ChatRequestError("the request body must be a JSON object")
        model = body.get("model")
        if model is not None and self.served_names and model not in self.served_names:
            raise ChatRequestError(f"model {model!r} is not served here; this server serves {self.served_names}",
                                   status=404)
        for key, neutral in _NOT_BUILT.items():
            if key in body and body[key] not in (neutral, None):
                raise ChatRequestError(f"request field {key!r}={body[key]!r} is not supported by this judge server")
        if int(body.get("n", 1) or 1) != 1:
            raise ChatRequestError("request field 'n' must be 1 (one answer per request) on this judge server")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ChatRequestError("request field 'messages' must be a non-empty list of {role, content}")
        prompt_ids = self._render(messages, body.get("chat_template_kwargs") or {})
        budget = self.prompt_length + self.response_length
        room = min(self.response_length, budget - len(prompt_ids))
        if room < 1:
            raise ChatRequestError(f"the prompt has {len(prompt_ids)} tokens; reward_model.rollout.prompt_length + "
                                   f"response_length = {budget} leaves no room for an answer: raise "
                                   "reward_model.rollout.prompt_length or shorten the judge prompt")
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = room if asked is None else min(int(asked), room)
        if max_tokens < 1:
            raise ChatRequestError(f"max_tokens must be >= 1, got {asked!r}")
        params: dict[str, Any] = {"max_tokens": max_tokens, "temperature": float(body.get("temperature", 1.0) or 0.0)}
        if params["temperature"] < 0:
            raise ChatRequestError("temperature must be >= 0")
        if body.get("top_p") is not None:
            params["top_p"] = float(body["top_p"])
        if body.get("top_k") is not None:
            params["top_k"] = int(body["top_k"])
        if body.get("seed") is not None:
            params["seed"] = int(body["seed"])
        top = self._top_logprobs(body)
        if top is not None:
            params["logprobs"] = top
        return prompt_ids, params

    def _top_logprobs(self, body: dict[str, Any]) -> int | None:
        """How many top log-probs to report per token (None: no log-probs asked)."""
        wanted, top = body.get("logprobs"), body.get("top_logprobs")
        if wanted not in (None, True, False):
            raise ChatRequestError(f"request field 'logprobs' must be true or false, got {wanted!r}")
        if top is not None:
            if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
                raise ChatRequestError(f"request field 'top_logprobs' must be an integer from 0 to "
                                       f"{MAX_TOP_LOGPROBS}, got {top!r}")
            if top > 0 and not wanted:
                raise ChatRequestError("request field 'top_logprobs' needs 'logprobs': true")
        if not wanted:
            return None
        if not getattr(self.backend, "reports_top_logprobs", False):
            raise ChatRequestError(f"request field 'logprobs' is not supported by this judge server's engine "
                                   f"({type(self.backend).__name__}); serve the judge with "
                                   "reward_model.rollout.name=hf or vllm for log-probs")
        return int(top or 0)

    def _logprobs(self, output: Any) -> dict[str, Any]:
        """OpenAI's ``choices[0].logprobs`` from a ScoredTokenOutput."""
        tops = getattr(output, "top_logprobs", None)
        if tops is None or output.log_probs is None or len(output.log_probs) != len(output.token_ids):
            raise ChatRequestError("the engine answered without log-probs for a request that asked for them",
                                   status=500)

        def entry(token_id: int, logprob: float) -> dict[str, Any]:
            token = self.tokenizer.decode([int(token_id)])
            return {"token": token, "logprob": float(logprob), "bytes": list(token.encode("utf-8", "replace"))}

        return {"content": [{**entry(token_id, logprob), "top_logprobs": [entry(i, lp) for i, lp in top]}
                            for token_id, logprob, top in zip(output.token_ids, output.log_probs, tops)]}

    def _render(self, messages: list[Any], template_kwargs: dict[str, Any]) -> list[int]:
        try:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                                      **template_kwargs)
        except Exception as err:  # noqa: BLE001 - the client's messages: a 400 naming the cause
            raise ChatRequestError(f"the messages could not be rendered with the model's chat template: {err}") \
                from err
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    # -- HTTP ----------------------------------------------------------------------------------------------------

    def _handle_get(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?")[0].rstrip("/")
        if path in ("/health", ""):
            status = 503 if self._engine_error is not None else 200
            state = repr(self._engine_error) if status != 200 else "asleep" if self._asleep else "ok"
            _reply(handler, status, {"status": state})
        elif path == "/v1/models":
            _reply(handler, 200, {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "verl"}
                                                             for n in self.served_names]})
        elif path == "/metrics":
            _reply(handler, 200, self.stats())
        else:
            _reply(handler, 404, {"error": {"message": f"no route {handler.path}"}})

    def _handle_post(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?")[0].rstrip("/")
        if path not in _CHAT_PATHS:
            _reply(handler, 404, {"error": {"message": f"no route {handler.path}; POST /v1/chat/completions"}})
            return
        try:
            try:
                body = read_json(handler)
            except ValueError as err:
                raise ChatRequestError(f"the request body is not JSON: {err}") from err
            _reply(handler, 200, self.complete(body))
        except ChatRequestError as err:
            _reply(handler, err.status, {"error": {"message": str(err), "type": "invalid_request_error"}})
        except Exception as err:  # noqa: BLE001 - a 500 naming the cause; the server keeps serving
            _reply(handler, 500, {"error": {"message": f"{type(err).__name__}: {err}"}})
