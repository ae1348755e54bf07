"""Running one rollout rank's share of the batch through agent loops (``rollout.mode=async``).

``rollout.agent.num_workers`` agent-loop workers, each a thread with its own asyncio loop, run one ``run()``
coroutine per sample of their slice; all of them send their requests to the rank's one engine, which the
calling (main) thread drives (server.py). A tool that blocks its worker's event loop therefore stalls only that
worker's trajectories, and vLLM keeps batching the others (HF batches wait for every live trajectory, so that
sampling does not depend on timing: server.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from typing import Any

import numpy as np
import torch.distributed as dist

from verl.protocol import DataProto
from verl.utils.rollout_trace import RolloutTraceConfig, get_trajectory_info, rollout_trace_attr
from verl.workers.reward_loop import META_KEY, RewardLoopSession, attach_loop_scores

# the built-in loops, imported for their @register side effect
from verl.workers.rollout.agent_loop import single_turn_agent_loop, tool_agent_loop  # noqa: F401
from verl.workers.rollout.agent_loop.base import (
    TEMPLATE_KWARGS_META_KEY,
    TRACE_META_KEY,
    AgentLoopOutput,
    TrainerConfigView,
)
from verl.workers.rollout.agent_loop.lockstep import EngineGroup, LockstepEngineLoop, MirroredEngineLoop
from verl.workers.rollout.agent_loop.outputs import outputs_to_batch
from verl.workers.rollout.agent_loop.registry import load_agent_loop_config, resolve_agent_loop
from verl.workers.rollout.agent_loop.server import CURRENT_ROW, AsyncLLMServerManager, EngineLoop, RolloutAborted
from verl.workers.rollout.agent_loop.vision import vision_batch
from verl.workers.rollout.seeding import CallSeeds, SamplingSeeds

__all__ = ["AgentLoopManager", "AgentLoopWorker"]


class AgentLoopWorker:
    """One slice of the samples, on its own thread and event loop."""

    def __init__(self, manager: AgentLoopManager, server: AsyncLLMServerManager, engine_loop: EngineLoop) -> None:
        self.manager = manager
        self.server = server
        self.engine_loop = engine_loop
        self.error: BaseException | None = None

    def run(self, rows: list[tuple[int, str, dict]], sampling_params: dict, outputs: list) -> None:
        try:
            asyncio.run(self._run_all(rows, sampling_params, outputs))
        except BaseException as err:  # reported by the manager on the main thread
            self.error = err

    async def _run_all(self, rows: list[tuple[int, str, dict]], sampling_params: dict, outputs: list) -> None:
        await asyncio.gather(*[self._run_one(i, name, kwargs, sampling_params, outputs) for i, name, kwargs in rows])

    async def _run_one(self, index: int, name: str, kwargs: dict, sampling_params: dict, outputs: list) -> None:
        CURRENT_ROW.set(index)  # this task's requests enter the engine in row order (server.py)
        try:
            loop = self.manager.new_loop(name, self.server)
            try:
                with self.manager.trace_attrs(index):
                    output = await loop.run(dict(sampling_params), **kwargs)
            except RolloutAborted:  # rollout.over_sample_rate cut the call short: the manager pads the row
                return
            if not isinstance(output, AgentLoopOutput):
                raise TypeError(f"agent loop {name!r} returned {type(output).__name__}, not an AgentLoopOutput")
            outputs[index] = output
            if self.manager.sample_done is not None:  # reward_model.use_reward_loop: scored from now on
                self.manager.sample_done(index, output)
        finally:
            self.engine_loop.trajectory_finished()


class AgentLoopManager:
    """``config`` is the worker's ActorRolloutRefConfig; ``make_backend(meta)`` builds this call's engine backend.
    ``seed``: with this rank's number, the seeds of the sampled batches of an engine that does not seed each request
    itself (HF), so that one seed gives the same trajectories whatever the tools' latency (server.py)."""

    def __init__(self, config: Any, tokenizer: Any, make_backend: Any, processor: Any = None,
                 engine_group: EngineGroup | None = None, seed: int = 0) -> None:
        self.config = config
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.seeds = SamplingSeeds(seed, dp_rank=rank)
        self.engine_group = engine_group  # None: this rank's engine is its own (see lockstep.py)
        self.rollout_config = config.rollout
        self.tokenizer = tokenizer
        self.processor = processor
        self.make_backend = make_backend
        self.trainer_config = TrainerConfigView(config)
        self.loops = load_agent_loop_config(self.rollout_config.agent.agent_loop_config_path)
        self._classes: dict[str, tuple[type, dict]] = {}
        self._lock = threading.Lock()
        self.last_stats: dict[str, float] = {}
        self.sample_done: Any = None  # called (row, output) as each trajectory ends, during generate_sequences

    def new_loop(self, name: str, server: AsyncLLMServerManager):
        with self._lock:  # worker threads resolve (and class-initialise) loops concurrently
            if name not in self._classes:
                cls, kwargs = resolve_agent_loop(name, self.loops)
                cls.init_class(self.trainer_config, self.tokenizer, self.processor, **kwargs)
                self._classes[name] = (cls, kwargs)
            cls, kwargs = self._classes[name]
        return cls(self.trainer_config, server, self.tokenizer, self.processor, **kwargs)

    def generate_sequences(self, prompts: DataProto, sampling_params: dict[str, Any]) -> DataProto:
        """Every row through its agent loop (the ``agent_name`` column, else ``agent.default_agent_loop``). With
        the trainer's reward-loop spec in ``meta_info`` (reward_model.use_reward_loop), each row is scored as soon
        as its trajectory ends, and the batch comes back with its scores (``rm_scores`` and the extra info)."""
        self._start_traces(prompts)
        template_kwargs = prompts.meta_info.get(TEMPLATE_KWARGS_META_KEY)
        if template_kwargs is not None:  # before any loop class initialises its renderer (tool_agent_loop.py)
            self.trainer_config.config.data.apply_chat_template_kwargs = dict(template_kwargs)
        spec = prompts.meta_info.pop(META_KEY, None)
        if spec is None:
            return self._generate(prompts, sampling_params, None)
        session = spec.session()
        self.sample_done = lambda index, output: session.submit(index, self._scoring_row(prompts, index, output))
        try:
            return self._generate(prompts, sampling_params, session)
        finally:
            self.sample_done = None
            session.close()

    def _start_traces(self, prompts: DataProto) -> None:
        """rollout.trace: one trace per trajectory, the first ``max_samples_per_step_per_worker`` rows of the call."""
        trace = self.rollout_config.trace
        self._trace_info: list[dict[str, Any]] | None = None
        if trace.backend is None:
            return
        names = prompts.meta_info.get(TRACE_META_KEY) or {"project_name": "verl", "experiment_name": "rollout"}
        RolloutTraceConfig.init(names["project_name"], names["experiment_name"], trace.backend, trace.token2text)
        index = prompts.non_tensor_batch.get("index")
        index = list(index) if index is not None else list(range(len(prompts)))
        info = get_trajectory_info(prompts.meta_info.get("global_steps", 0), index,
                                   bool(prompts.meta_info.get("validate", False)))
        limit = trace.max_samples_per_step_per_worker
        self._trace_info = [{**row, "trace": limit is None or i < limit} for i, row in enumerate(info)]

    def trace_attrs(self, index: int):
        """The trajectory's trace context (a no-op without rollout.trace)."""
        info = getattr(self, "_trace_info", None)
        if info is None:
            return contextlib.nullcontext()
        row = info[index]
        return rollout_trace_attr(sample_index=row["sample_index"], step=row["step"], rollout_n=row["rollout_n"],
                                  validate=row["validate"], trace=row["trace"], name="agent_loop")

    def _scoring_row(self, prompts: DataProto, index: int, output: AgentLoopOutput) -> DataProto:
        """The row as the trainer's reward manager would see it after generation: the trajectory's tensors and
        extra fields, with the prompt's columns (not the loop's own score, nor the counters the trainer pops)."""
        row = outputs_to_batch([output], self.rollout_config.prompt_length, self.rollout_config.response_length,
                               int(prompts.meta_info["pad_token_id"]))
        # not the reward manager's: the loop's own score, and the MoE routing (R3) only the actor replays
        dropped = [k for k in ("rm_scores", "routed_experts") if k in row.batch.keys()]
        if dropped:
            row.batch = row.batch.exclude(*dropped)
        columns = {k: v for k, v in row.non_tensor_batch.items() if not k.startswith("__")}
        columns.update({k: v[index:index + 1] for k, v in prompts.non_tensor_batch.items()})
        row.non_tensor_batch = columns
        return row

    def _generate(self, prompts: DataProto, sampling_params: dict[str, Any],
                  session: RewardLoopSession | None) -> DataProto:
        rows = self._rows(prompts)
        backend = self.make_backend(prompts.meta_info)
        engine_loop = self._engine_loop(backend, self.seeds.next_call(prompts.meta_info),
                                        self._abort_after(len(rows), prompts.meta_info))
        if isinstance(engine_loop, MirroredEngineLoop) and not self.engine_group.is_leader:
            return self._follow(engine_loop)
        server = AsyncLLMServerManager(engine_loop, self.rollout_config.prompt_length,
                                       self.rollout_config.response_length)
        outputs: list[AgentLoopOutput | None] = [None] * len(rows)
        n_workers = max(1, min(self.rollout_config.agent.num_workers, len(rows)))
        workers = [AgentLoopWorker(self, server, engine_loop) for _ in range(n_workers)]
        for _ in rows:
            engine_loop.trajectory_started()
        threads = [threading.Thread(target=w.run, args=(part, sampling_params, outputs), daemon=True,
                                    name=f"agent-loop-worker-{k}")
                   for k, (w, part) in enumerate(zip(workers, _slices(rows, n_workers)))]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        try:
            engine_loop.serve(done=lambda: not any(t.is_alive() for t in threads))
        except BaseException as err:
            if isinstance(engine_loop, MirroredEngineLoop):  # the followers wait for a batch: send the error
                dist.broadcast_object_list([err], src=self.engine_group.leader, group=self.engine_group.group)
            raise
        for thread in threads:
            thread.join()
        self.last_stats = {"agent/engine_steps": engine_loop.steps, "agent/max_in_flight": engine_loop.max_in_flight,
                           "agent/seconds": time.perf_counter() - start}
        error = next((w.error for w in workers if w.error is not None), None)
        result = error
        if error is None:
            try:
                aborted = [i for i, output in enumerate(outputs) if output is None]
                for i in aborted:  # over_sample_rate: the dropped rows, scored like the others (reward loop too)
                    outputs[i] = _aborted_output(rows[i][2], outputs)
                    if self.sample_done is not None:
                        self.sample_done(i, outputs[i])
                result = outputs_to_batch(outputs, self.rollout_config.prompt_length,
                                          self.rollout_config.response_length, int(prompts.meta_info["pad_token_id"]))
                if engine_loop.abort_after is not None:
                    dropped = set(aborted)
                    result.non_tensor_batch["__aborted__"] = np.array([i in dropped for i in range(len(rows))],
                                                                      dtype=object)
                # a VLM batch's (bs, 4, L) positions and each trajectory's multi_modal_inputs
                vision_batch(result, outputs, prompts, self.processor)
                if session is not None:
                    wait = time.perf_counter()
                    result = attach_loop_scores(result, session.finish(len(rows)))
                    self.last_stats["reward_loop/wait_s"] = time.perf_counter() - wait
            except Exception as err:  # noqa: BLE001 - the followers must hear of it too
                result = err
        if isinstance(engine_loop, MirroredEngineLoop):  # the followers return the same batch, or raise the same
            dist.broadcast_object_list([result], src=self.engine_group.leader, group=self.engine_group.group)
        if isinstance(result, BaseException):
            raise result
        return result

    def _abort_after(self, n_rows: int, meta: dict[str, Any]) -> int | None:
        """rollout.over_sample_rate (training calls only): how many trajectories end the call, the rest aborted."""
        rate = float(self.rollout_config.over_sample_rate)
        if rate <= 0 or meta.get("validate", False):
            return None
        keep = max(1, math.ceil(n_rows * (1.0 - rate)))
        return keep if keep < n_rows else None

    def _engine_loop(self, backend: Any, seeds: CallSeeds, abort_after: int | None = None) -> EngineLoop:
        group = self.engine_group
        if group is None or group.size <= 1:
            return EngineLoop(backend, seeds=seeds, abort_after=abort_after)
        if group.kind == "lockstep":
            return LockstepEngineLoop(backend, group, seeds=seeds, abort_after=abort_after)
        if abort_after is not None:  # checked before Ray too (verl.trainer.config.checks)
            raise ValueError("actor_rollout_ref.rollout.over_sample_rate > 0 with a tensor-parallel vLLM engine: the "
                             "engine's ranks would have to abort the same requests together, which is not built")
        return MirroredEngineLoop(backend, group, seeds=seeds)

    def _follow(self, engine_loop: MirroredEngineLoop) -> DataProto:
        """A tensor-parallel follower: step the engine with the leader's requests, then take its batch."""
        engine_loop.follow()
        message = [None]
        dist.broadcast_object_list(message, src=self.engine_group.leader, group=self.engine_group.group)
        if isinstance(message[0], BaseException):
            raise RuntimeError(f"the agent loop on this engine's first rank failed: {message[0]!r}") from message[0]
        return message[0]

    def _rows(self, prompts: DataProto) -> list[tuple[int, str, dict]]:
        ids, mask = prompts.batch["input_ids"], prompts.batch["attention_mask"]
        names = prompts.non_tensor_batch.get("agent_name")  # a dataset column
        default = self.rollout_config.agent.default_agent_loop
        rows = []
        for i in range(len(prompts)):
            kwargs = {key: _plain(column[i]) for key, column in prompts.non_tensor_batch.items()}
            kwargs["raw_prompt_ids"] = ids[i][mask[i].bool()].tolist()  # what the sync rollout would send
            name = str(names[i]) if names is not None and names[i] else default
            rows.append((i, name, kwargs))
        return rows


def _aborted_output(kwargs: dict, outputs: list[AgentLoopOutput | None]) -> AgentLoopOutput:
    """A row over_sample_rate dropped: its prompt as the sync rollout sends it and an empty response (no token is
    trained on it), with the finished rows' extra fields set to empty values so the columns stay uniform."""
    template = next((o for o in outputs if o is not None), None)
    images = (kwargs.get("multi_modal_data") or {}).get("image") or None
    videos = (kwargs.get("multi_modal_data") or {}).get("video") or None
    media = {**({"image": list(images)} if images else {}), **({"video": list(videos)} if videos else {})}
    return AgentLoopOutput(prompt_ids=list(kwargs["raw_prompt_ids"]), response_ids=[], response_mask=[],
                           response_logprobs=[] if template and template.response_logprobs is not None else None,
                           num_turns=1, extra_fields={k: _empty_like(v) for k, v in (template.extra_fields if template
                                                                                      else {}).items()},
                           multi_modal_data=media or None)


def _empty_like(value: Any) -> Any:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return type(value)(0)
    if isinstance(value, list | tuple | dict):
        return type(value)()
    return None


def _slices(rows: list, n: int) -> list[list]:
    """n contiguous, near-equal slices."""
    return [[rows[j] for j in part] for part in np.array_split(np.arange(len(rows)), n)]


def _plain(value: Any) -> Any:
    """numpy containers from the dataset's object columns -> Python lists/dicts, as a loop's kwargs."""
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
