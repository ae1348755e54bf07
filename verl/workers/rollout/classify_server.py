"""A discriminative reward model behind vLLM's ``/classify`` endpoint: what upstream's reward loop asks when
``reward_model.rollout.name`` serves a reward model and no custom reward function is set.

``POST /classify`` (also ``/v1/classify``) with ``{"model", "input": text or [texts], "use_activation",
"add_special_tokens"}`` answers ``{"object": "list", "data": [{"index", "label", "probs": [score],
"num_classes": 1}], "usage"}``, in vLLM's format. The score is the model's output at the input's last token, as the
FSDP reward-model worker reads it (verl.workers.reward_model_worker); ``use_activation`` (vLLM's older name
``activation``; vLLM's default true) passes it through a sigmoid, false leaves the raw score, which is what the
reward loop asks for. ``add_special_tokens`` defaults to true, as vLLM's does. Other fields that would change the
answer are answered with HTTP 400 naming the field. An input longer than ``max_tokens`` tokens is a 400 naming the
budget's keys.

Requests waiting together are scored as one batch by the engine thread, up to ``max_batch`` rows, by a scorer:
``HFClassifier`` (one right-padded HF forward) or ``VLLMClassifier`` (vLLM's pooling runner, ``LLM.classify`` on
token ids with ``use_activation=False``; built by verl.workers.genrm_engine).
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch

from verl.utils.json_http import json_reply, read_json

__all__ = ["ClassifyRequestError", "ClassifyServer", "HFClassifier", "VLLMClassifier"]

_CLASSIFY_PATHS = ("/classify", "/v1/classify")
_FIELDS = {"model", "input", "use_activation", "activation", "add_special_tokens", "user"}


class ClassifyRequestError(ValueError):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class HFClassifier:
    """``model``: a one-label token-classification model (verl.models.value_head.load_reward_model), in eval mode on
    its device; ``pad_id``: the tokenizer's pad (else EOS) id. ``score(rows)``: each row's raw score."""

    def __init__(self, model: Any, pad_id: int) -> None:
        self.model = model
        self.pad_id = int(pad_id)

    @torch.no_grad()
    def score(self, rows: list[list[int]]) -> list[float]:
        from verl.models.value_head import values_from_output
        from verl.workers.reward_model_inputs import last_token_index

        width = max(len(ids) for ids in rows)
        input_ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, ids in enumerate(rows):
            input_ids[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[i, : len(ids)] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        device = next(self.model.parameters()).device
        output = self.model(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                            position_ids=positions.to(device), use_cache=False)
        last = last_token_index(mask).to(device)
        return values_from_output(output)[torch.arange(len(rows), device=device), last].float().cpu().tolist()


class VLLMClassifier:
    """``llm``: a ``vllm.LLM`` on the pooling runner (``runner="pooling"``) whose model is a one-label sequence
    classifier. ``score(rows)``: each row's raw score (``use_activation=False``), the last token's, as vLLM's
    classifiers pool. Called from the classify server's engine thread only (vLLM's offline engine is not
    thread-safe)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def score(self, rows: list[list[int]]) -> list[float]:
        from vllm import TokensPrompt
        from vllm.pooling_params import PoolingParams

        outputs = self.llm.classify([TokensPrompt(prompt_token_ids=list(ids)) for ids in rows], use_tqdm=False,
                                    pooling_params=PoolingParams(use_activation=False))
        scores = []
        for output in outputs:
            probs = list(output.outputs.probs)
            if len(probs) != 1:
                raise RuntimeError(f"the vLLM classifier answered {len(probs)} values per input; a reward model has "
                                   "one label")
            scores.append(float(probs[0]))
        return scores


class ClassifyServer:
    """``scorer``: ``HFClassifier`` or ``VLLMClassifier``; ``tokenizer``: the reward model's; ``served_names``: the
    ``model`` values accepted; ``max_tokens``: the longest input (tokens); ``budget_keys``: the keys that set it,
    for the error."""

    def __init__(self, scorer: Any, tokenizer: Any, served_names: list[str], max_tokens: int, budget_keys: str,
                 max_batch: int = 64) -> None:
        self.scorer = scorer
        self.tokenizer = tokenizer
        self.served_names = [n for n in served_names if n]
        self.max_tokens = int(max_tokens)
        self.budget_keys = budget_keys
        self.max_batch = max(1, int(max_batch))
        self.counters = {"requests": 0, "completed": 0, "failed": 0, "prompt_tokens": 0, "batches": 0,
                         "max_batch_rows": 0}
        self._queue: queue.SimpleQueue[tuple[list[int], Future]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._engine = threading.Thread(target=self._serve, name="classify-engine", daemon=True)
        self._http: ThreadingHTTPServer | None = None

    # -- life cycle ----------------------------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server._handle_get(self)

            def do_POST(self) -> None:  # noqa: N802
                server._handle_post(self)

        self._engine.start()
        self._http = ThreadingHTTPServer((host, port), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, name="classify-http", daemon=True).start()
        return self.address

    @property
    def address(self) -> str:
        host, port = self._http.server_address[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        self._stopping.set()
        self._engine.join()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return dict(self.counters)

    # -- requests ------------------------------------------------------------------------------------------------

    def classify(self, body: Any) -> dict[str, Any]:
        """vLLM's classify response for ``body`` (raises ClassifyRequestError for what cannot be answered)."""
        if not isinstance(body, dict):
            raise ClassifyRequestError("the request body must be a JSON object")
        unknown = sorted(set(body) - _FIELDS)
        if unknown:
            raise ClassifyRequestError(f"request field {unknown[0]!r} is not supported by this reward-model server")
        model = body.get("model")
        if model is not None and model not in self.served_names:
            raise ClassifyRequestError(f"model {model!r} is not served here; served: {self.served_names}", 404)
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else texts
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise ClassifyRequestError("request field 'input' must be a string or a non-empty list of strings")
        activation = body.get("use_activation", body.get("activation", True))
        special = body.get("add_special_tokens", True)
        if not isinstance(activation, bool) or not isinstance(special, bool):
            raise ClassifyRequestError("request fields 'use_activation' / 'activation' / 'add_special_tokens' must "
                                       "be true or false")
        rows = [self.tokenizer.encode(text, add_special_tokens=special) for text in texts]
        for ids in rows:
            if not ids or len(ids) > self.max_tokens:
                raise ClassifyRequestError(f"an input has {len(ids)} tokens; the reward-model server takes 1 to "
                                           f"{self.max_tokens} ({self.budget_keys})")
        with self._lock:
            self.counters["requests"] += 1
        futures = [self._submit(ids) for ids in rows]
        try:
            scores = [future.result() for future in futures]
        except Exception:
            with self._lock:
                self.counters["failed"] += 1
            raise
        if activation:
            scores = [float(torch.sigmoid(torch.tensor(score))) for score in scores]
        tokens = sum(len(ids) for ids in rows)
        with self._lock:
            self.counters["completed"] += 1
            self.counters["prompt_tokens"] += tokens
        return {"id": f"classify-{uuid.uuid4().hex}", "object": "list", "created": int(time.time()),
                "model": self.served_names[0] if self.served_names else model,
                "data": [{"index": i, "label": "LABEL_0", "probs": [score], "num_classes": 1}
                         for i, score in enumerate(scores)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def _submit(self, ids: list[int]) -> Future:
        if self._stopping.is_set():
            raise ClassifyRequestError("the reward-model server is stopping", 503)
        future: Future = Future()
        self._queue.put((ids, future))
        return future

    # -- the engine thread ---------------------------------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=0.05)
            except queue.Empty:
                if self._stopping.is_set():
                    return
                continue
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            try:
                scores = self._score([ids for ids, _ in batch])
            except Exception as err:  # noqa: BLE001 - every request of the batch learns why (HTTP 500)
                for _, future in batch:
                    future.set_exception(RuntimeError(f"the reward model failed: {type(err).__name__}: {err}"))
                continue
            for (_, future), score in zip(batch, scores):
                future.set_result(score)

    def _score(self, rows: list[list[int]]) -> list[float]:
        scores = self.scorer.score(rows)
        with self._lock:
            self.counters["batches"] += 1
            self.counters["max_batch_rows"] = max(self.counters["max_batch_rows"], len(rows))
        return scores

    # -- HTTP ----------------------------------------------------------------------------------------------------

    def _handle_get(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?")[0].rstrip("/")
        if path in ("/health", ""):
            json_reply(handler, 200, {"status": "ok"})
        elif path == "/v1/models":
            json_reply(handler, 200, {"object": "list", "data": [{"id": n, "object": "model", "owned_by": "verl"}
                                                                 for n in self.served_names]})
        elif path == "/metrics":
            json_reply(handler, 200, self.stats())
        else:
            json_reply(handler, 404, {"error": {"message": f"no route {handler.path}"}})

    def _handle_post(self, handler: BaseHTTPRequestHandler) -> None:
        path = handler.path.split("?")[0].rstrip("/")
        if path not in _CLASSIFY_PATHS:
            json_reply(handler, 404, {"error": {"message": f"no route {handler.path}; this reward-model server "
                                                           "answers POST /classify"}})
            return
        try:
            try:
                body = read_json(handler)
            except ValueError as err:
                raise ClassifyRequestError(f"the request body is not JSON: {err}") from err
            json_reply(handler, 200, self.classify(body))
        except ClassifyRequestError as err:
            json_reply(handler, err.status, {"error": {"message": str(err), "type": "invalid_request_error"}})
        except Exception as err:  # noqa: BLE001 - a 500 naming the cause; the server keeps serving
            json_reply(handler, 500, {"error": {"message": f"{type(err).__name__}: {err}"}})
