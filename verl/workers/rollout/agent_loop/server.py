"""The engine side of the agent loop: token ids in, token ids (and log-probs) out, many trajectories at once.

Agent-loop workers run their coroutines on their own threads; every ``generate`` becomes a request on one queue.
The engine loop runs on the rollout worker's main thread (where the engine, its weights and its core pinning
live) and batches whatever is queued:

- vLLM: requests go straight into the in-process engine (``add_request``/``step``), which batches continuously,
  so a trajectory that comes back from a tool joins the running batch at the next step. Weights keep syncing
  in process, as for the sync rollout.
- HF: one ``generate`` call per batch of queued requests (the HF rollout's own sampling code), so concurrency
  comes from batching the trajectories that are waiting at the same time.

Before starting a batch from idle, the loop waits briefly until every live trajectory has asked (or a short
deadline passes): single-turn rows then form one batch, exactly as the sync rollout would have.

Reproducible sampling, whatever the tools' latency: the vLLM backend gives every sampled request its own seed from
its (row, turn) (verl.workers.rollout.seeding), so what it draws does not depend on what it was batched with. HF
generate draws for a whole batch from one generator, so there the batches themselves must not depend on timing:
given the call's seeds (``seeds``), the loop waits, without a deadline, until every live trajectory has asked
before it starts a batch (the turns of one call advance together), and seeds the generator of the k-th batch it
runs from (call seed, k). The same seed then gives the same batches, the same draws and the same trajectories.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from verl.utils.rollout_trace import rollout_trace_op
from verl.workers.rollout.seeding import CallSeeds, derive_seed

__all__ = ["TokenOutput", "AsyncLLMServerManager", "EngineLoop", "EngineRequest", "RolloutAborted"]

# How long an idle engine waits for the other live trajectories to ask before it starts a batch without them: the
# first batch of a call waits longer, so that rows that all start by generating form one batch, as in sync mode.
GATHER_WAIT_S = 0.05
FIRST_GATHER_WAIT_S = 5.0
_BATCH_SEED_TAG = -2  # (call seed, tag, k): the k-th batch's seed, apart from any (row, turn) request seed


class RolloutAborted(Exception):
    """Raised into a trajectory's pending or later ``generate`` once ``rollout.over_sample_rate`` has ended the call:
    enough trajectories finished, the rest are dropped (the manager gives them an empty response)."""


@dataclass
class TokenOutput:
    token_ids: list[int]
    log_probs: list[float] | None = None
    stop_reason: str = "stop"  # "stop": the model ended its turn (EOS); "length": max_tokens was reached
    # R3 (rollout.enable_rollout_routing_replay): the MoE experts of every token of prompt_ids + token_ids, as
    # (tokens, moe_layers, top_k) int16 (upstream's routed_experts); NOT_ROUTED (-1) where the engine fed no token
    # (the last generated one)
    routed_experts: Any = None


@dataclass
class EngineRequest:
    request_id: str
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    future: Future = field(default_factory=Future)
    order: tuple = ()  # (row, the row's call number): requests enter the engine sorted by it
    image_data: list[Any] | None = None  # the prompt's images (PIL), in the order of its image tokens
    video_data: list[Any] | None = None  # the prompt's videos ((frames, metadata) pairs), in the order of their tokens


# The batch row the running coroutine serves, set by the agent-loop worker (a context variable follows the task).
CURRENT_ROW: contextvars.ContextVar[int] = contextvars.ContextVar("agent_loop_row", default=-1)
_CALLS: contextvars.ContextVar[list] = contextvars.ContextVar("agent_loop_calls")


def seeds_each_request(backend: Any) -> bool:
    """Whether the backend gives every request a generator of its own (vLLM's ``request_seed``)."""
    return callable(getattr(backend, "request_seed", None))


@contextlib.contextmanager
def seeded_global_generator(seed: int) -> Iterator[None]:
    """torch's global generators (CPU and this process's current GPU) seeded for the block, then restored, so the
    draws around it are the same as if it had not run."""
    import torch

    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class EngineLoop:
    """The queue between agent-loop threads and one engine backend (``add``, ``has_work``, ``step``). ``seeds``: the
    call's seeds; with a backend that does not seed each request (HF), batches then wait for every live trajectory
    and each is sampled from its own seed (the module docstring)."""

    def __init__(self, backend: Any, gather_wait_s: float = GATHER_WAIT_S, seeds: CallSeeds | None = None,
                 abort_after: int | None = None) -> None:
        """``abort_after``: once that many trajectories have finished, abort the others (rollout.over_sample_rate)."""
        self.backend = backend
        self.abort_after = abort_after
        self.aborted = False
        self._finished = 0
        self.gather_wait_s = gather_wait_s
        self.seeds = seeds if seeds is not None and not seeds_each_request(backend) else None
        self.batches = 0  # steps in which this rank's backend had requests of its own (lockstep rounds aside)
        self._queue: queue.SimpleQueue[EngineRequest] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._live = 0  # trajectories started and not finished
        self._waiting = 0  # requests submitted and not answered
        self._ids = itertools.count()
        self.steps = 0
        self.max_in_flight = 0

    # -- called from agent-loop threads ---------------------------------------------------------------------------

    def submit(self, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
               order: tuple = (), image_data: list[Any] | None = None,
               video_data: list[Any] | None = None) -> Future:
        request = EngineRequest(f"{request_id}-{next(self._ids)}", list(prompt_ids), dict(sampling_params),
                                order=order, image_data=list(image_data) if image_data else None,
                                video_data=list(video_data) if video_data else None)
        with self._lock:
            if self.aborted:  # a trajectory back from a tool after the call was cut short
                request.future.set_exception(RolloutAborted(request.request_id))
                return request.future
            self._waiting += 1
        self._queue.put(request)
        return request.future

    def trajectory_started(self) -> None:
        with self._lock:
            self._live += 1

    def trajectory_finished(self) -> None:
        with self._lock:
            self._live -= 1
            self._finished += 1

    def _abort_due_locked(self) -> bool:
        return (self.abort_after is not None and not self.aborted and self._finished >= self.abort_after
                and self._live > 0)

    def _abort_due(self) -> bool:
        with self._lock:
            return self._abort_due_locked()

    def _abort_if_enough(self) -> None:
        """rollout.over_sample_rate: once ``abort_after`` trajectories have finished, every request still queued or
        in the engine, and any a live trajectory sends later, ends with RolloutAborted."""
        with self._lock:
            if not self._abort_due_locked():
                return
            self.aborted = True
            self._waiting = 0
        self.backend.abort_all(RolloutAborted("rollout.over_sample_rate: enough trajectories finished"))
        self._fail_queued(None)

    # -- the engine thread ----------------------------------------------------------------------------------------

    def serve(self, done: Callable[[], bool]) -> None:
        """Run the engine until ``done()`` (every worker thread has finished) and nothing is pending."""
        try:
            while True:
                self._abort_if_enough()
                self._collect(block=not self.backend.has_work())
                if self.backend.has_work():
                    self._step()
                elif done() and self._queue.empty():
                    return
        except BaseException as err:  # the engine failed: every waiting trajectory must learn it, not hang
            self.backend.fail_all(err)
            self._fail_queued(err)
            raise

    def _collect(self, block: bool) -> None:
        """Move queued requests into the engine, in row order. Before a batch starts from idle, wait for the other
        live trajectories to ask too, so that rows ready together are batched together, in a fixed order."""
        incoming = self._drain(block)
        if incoming and self.backend.idle():
            incoming += self._gather(FIRST_GATHER_WAIT_S if self.steps == 0 else self.gather_wait_s)
        for request in sorted(incoming, key=lambda r: r.order):
            self.backend.add(request)

    def _drain(self, block: bool) -> list[EngineRequest]:
        try:
            first = self._queue.get(timeout=0.01) if block else self._queue.get_nowait()
        except queue.Empty:
            return []
        taken = [first]
        while True:
            try:
                taken.append(self._queue.get_nowait())
            except queue.Empty:
                return taken

    def _gather(self, wait_s: float) -> list[EngineRequest]:
        """Wait until every live trajectory has asked: at most ``wait_s``, or for as long as it takes when batches
        must not depend on timing (``seeds``): a trajectory that is not waiting is in a tool, and will ask or end."""
        taken: list[EngineRequest] = []
        deadline = None if self.seeds is not None else time.monotonic() + wait_s
        while deadline is None or time.monotonic() < deadline:
            if self._abort_due():  # the trajectories still out will be aborted, not waited for
                break
            with self._lock:
                if self._waiting >= self._live:
                    break
            poll = 0.01 if deadline is None else max(0.0, min(0.01, deadline - time.monotonic()))
            try:
                taken.append(self._queue.get(timeout=poll))
            except queue.Empty:
                continue
        return taken + self._drain(block=False)

    def _step(self) -> None:
        self.max_in_flight = max(self.max_in_flight, self.backend.in_flight())
        if self.seeds is not None and self.backend.has_work():
            with seeded_global_generator(derive_seed(self.seeds.base, _BATCH_SEED_TAG, self.batches)):
                finished = self.backend.step()
            self.batches += 1
        else:
            finished = self.backend.step()
        self.steps += 1
        for request, output in finished:
            with self._lock:
                self._waiting -= 1
            request.future.set_result(output)

    def _fail_queued(self, err: BaseException | None) -> None:
        """Every queued request ends: with the engine's failure ``err``, or (None) aborted by over_sample_rate."""
        while True:
            try:
                request = self._queue.get_nowait()
            except queue.Empty:
                return
            if not request.future.done():
                request.future.set_exception(RuntimeError(f"the rollout engine failed: {err!r}") if err is not None
                                             else RolloutAborted(request.request_id))


class AsyncLLMServerManager:
    """Upstream's name for what an agent loop calls: ``await generate(request_id, prompt_ids=..., sampling_params=...)``.

    ``sampling_params`` are vLLM ``SamplingParams`` fields (temperature, top_p, top_k, logprobs, max_tokens, ...).
    Without ``max_tokens``, a request may fill the rest of the response budget (prompt_length + response_length -
    len(prompt_ids), at most response_length). ``image_data``: the prompt's images (PIL), one per image in
    ``prompt_ids``, whose image tokens are already expanded (as the processor renders them). ``video_data``: the
    prompt's videos, (frames, metadata) pairs as ``multi_modal_data["video"]`` holds them, expanded likewise."""

    def __init__(self, engine_loop: EngineLoop, prompt_length: int, response_length: int) -> None:
        self.engine_loop = engine_loop
        self.prompt_length = prompt_length
        self.response_length = response_length

    @rollout_trace_op
    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any],
                       image_data: Any = None, video_data: Any = None, **kwargs: Any) -> TokenOutput:
        import asyncio

        params = dict(sampling_params)
        room = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        max_tokens = min(int(params.get("max_tokens", room)), room)
        if max_tokens < 1:
            return TokenOutput(token_ids=[], log_probs=[] if params.get("logprobs") is not None else None,
                               stop_reason="length")
        params["max_tokens"] = max_tokens
        calls = _CALLS.get(None)
        if calls is None:
            calls = [0]
            _CALLS.set(calls)
        calls[0] += 1
        order = (CURRENT_ROW.get(), calls[0])
        return await asyncio.wrap_future(self.engine_loop.submit(request_id, prompt_ids, params, order=order,
                                                                 image_data=image_data, video_data=video_data))
