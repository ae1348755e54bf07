"""The two engines an agent loop can drive, behind one small interface (``add``, ``has_work``, ``idle``,
``in_flight``, ``step``, ``fail_all``), used only from the rollout worker's main thread by ``EngineLoop``."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.models.router_replay import ROUTED_EXPERTS_KEY
from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.rollout.agent_loop.server import EngineRequest, TokenOutput
from verl.workers.rollout.seeding import seeded

__all__ = ["VLLMBackend", "HFBackend"]


class VLLMBackend:
    """The in-process vLLM engine of a ``vLLMRollout``: requests join its continuous batch as they arrive. ``meta``:
    the generate call's meta_info; with the request's (row, turn) it gives each sampled request its own seed, so
    what a trajectory samples does not depend on what it was batched with (verl.workers.rollout.seeding).
    A request's images (``image_data``, PIL, in the order of its image tokens) go to vLLM's multi-modal prompt; the
    prompt the engine expands from them must be the request's own (the actor scores that one)."""

    def __init__(self, rollout: Any, meta: dict[str, Any] | None = None) -> None:
        rollout._require_weights()
        self.rollout = rollout
        self.engine = rollout.llm.llm_engine
        # a rollout that says nothing of vision (a stand-in engine) serves a text model
        self.vision = bool(getattr(rollout, "vision", False))
        self.image_token_id = getattr(rollout, "image_token_id", None)
        self.vision_bias = dict(getattr(rollout, "vision_bias", None) or {})
        self.call_seeds = rollout.seeds.next_call(meta)
        self.unordered = 0  # requests submitted without a (row, turn): numbered by arrival
        self.pending: dict[str, EngineRequest] = {}
        self.started: set[str] = set()  # requests that have been through at least one engine step
        # R3: every finished request reports vLLM's record of its tokens' experts (verl.workers.rollout.vllm.routing)
        self.record_routing = bool(getattr(getattr(rollout, "config", None), "enable_rollout_routing_replay", False))

    def request_seed(self, order: tuple) -> int:
        if len(order) >= 2:
            return self.call_seeds.seed(int(order[0]), int(order[1]))
        self.unordered += 1
        return self.call_seeds.seed(-1, self.unordered)

    def add(self, request: EngineRequest) -> None:
        from vllm import SamplingParams

        from verl.workers.rollout.vllm.vision import engine_prompt, with_logit_bias

        if request.image_data and not self.vision:
            raise ValueError(f"agent-loop request {request.request_id} carries images (image_data) but the rollout "
                             "model is text-only; actor_rollout_ref.model.path must be a vision-language model")
        if request.video_data:  # refused before Ray too (verl.trainer.ppo.vision_checks.video_run_problems)
            raise NotImplementedError(f"agent-loop request {request.request_id} carries videos (video_data): the vLLM "
                                      "rollout takes no videos here; set actor_rollout_ref.rollout.name=hf")
        if request.sampling_params.get("seed") is None:
            # set on the request itself: a tensor-parallel leader forwards these params to its followers (lockstep.py)
            request.sampling_params = seeded(request.sampling_params, self.request_seed(request.order))
        prompt = engine_prompt(request.prompt_ids, request.image_data, self.image_token_id)
        params = with_logit_bias(request.sampling_params, self.vision_bias)  # no vision token in a response
        self.engine.add_request(request.request_id, prompt, SamplingParams(**params))
        self.pending[request.request_id] = request

    def has_work(self) -> bool:
        return bool(self.pending)

    def idle(self) -> bool:
        return not self.started

    def in_flight(self) -> int:
        return len(self.pending)

    def step(self) -> list[tuple[EngineRequest, TokenOutput]]:
        from verl.workers.rollout.vllm.engine import engine_placement

        self.started.update(self.pending)
        with engine_placement(self.rollout.core, self.rollout.threads):
            outputs = self.engine.step()
        finished = []
        for out in outputs:
            if not out.finished or out.request_id not in self.pending:
                continue
            request = self.pending.pop(out.request_id)
            self.started.discard(out.request_id)
            if request.image_data:
                self._check_expansion(request, out, finished)
            completion = out.outputs[0]
            tokens = list(completion.token_ids)
            log_probs = None
            if request.sampling_params.get("logprobs") is not None:
                steps = completion.logprobs or []
                log_probs = [steps[i][tok].logprob for i, tok in enumerate(tokens)]
            reason = "length" if completion.finish_reason == "length" else "stop"
            finished.append((request, self._output(request, completion, tokens, log_probs, reason)))
        return finished

    @staticmethod
    def _check_expansion(request: EngineRequest, out: Any, finished: list) -> None:
        """Raises (the engine loop then fails every trajectory) when vLLM's image expansion is not the request's;
        the requests already taken out of ``pending`` in this step learn it here, as ``fail_all`` will not see them."""
        from verl.workers.rollout.vllm.vision import check_expansion

        try:
            check_expansion(request.prompt_ids, out.prompt_token_ids, f"agent-loop request {request.request_id}")
        except ValueError as err:
            for taken in [request] + [done for done, _ in finished]:
                if not taken.future.done():
                    taken.future.set_exception(err)
            raise

    def _output(self, request: EngineRequest, completion: Any, tokens: list[int], log_probs: list[float] | None,
                reason: str) -> TokenOutput:
        """What a finished request gets (a subclass may report more of vLLM's ``completion``)."""
        experts = None
        if self.record_routing:
            from verl.workers.rollout.vllm.routing import engine_record

            experts = engine_record(completion, len(request.prompt_ids) + len(tokens),
                                    f"agent-loop request {request.request_id}")
        return TokenOutput(tokens, log_probs, reason, routed_experts=experts)

    def fail_all(self, err: BaseException) -> None:
        self.abort_all(RuntimeError(f"the vLLM engine failed: {err!r}"))

    def abort_all(self, err: BaseException) -> None:
        """Drop every request from the engine; each waiting trajectory gets ``err``."""
        if self.pending:
            self.engine.abort_request(list(self.pending))
        for request in self.pending.values():
            if not request.future.done():
                request.future.set_exception(err)
        self.pending.clear()
        self.started.clear()


class HFBackend:
    """HF ``generate`` on the actor's module (through ``HFRollout``), one call per batch of queued requests with
    the same sampling settings; prompts are left-padded to at least ``prompt_length``, as the sync rollout's are.
    With rollout.enable_rollout_routing_replay (R3) the HF rollout records the MoE routing of each batch (decoding
    eagerly) and every output carries its request's ``routed_experts`` (prompt + response tokens).
    A request's images (``image_data``) become its row's pixel_values / image_grid_thw through ``processor``'s image
    processor (the model folder's, as the dataset used), and its videos (``video_data``) pixel_values_videos /
    video_grid_thw (/ second_per_grid_ts) through its video processor; the HF rollout hands them to generate."""

    def __init__(self, rollout: Any, meta: dict[str, Any], prompt_length: int, processor: Any = None) -> None:
        self.rollout = rollout
        self.processor = processor
        self.meta = meta  # eos/pad ids and the validate flag of this generate_sequences call
        self.prompt_length = prompt_length
        self.queue: list[EngineRequest] = []

    def add(self, request: EngineRequest) -> None:
        self.queue.append(request)

    def has_work(self) -> bool:
        return bool(self.queue)

    def idle(self) -> bool:
        return True  # every batch starts from scratch

    def in_flight(self) -> int:
        return len(self.queue)

    @staticmethod
    def _settings(params: dict[str, Any]) -> tuple:
        return (params.get("temperature"), params.get("top_p"), params.get("top_k"), params.get("logprobs"))

    def step(self) -> list[tuple[EngineRequest, TokenOutput]]:
        if not self.queue:  # a lockstep round (lockstep.py) in which this rank has nothing to generate
            self._dummy_forward()
            return []
        key = self._settings(self.queue[0].sampling_params)
        batch = [r for r in self.queue if self._settings(r.sampling_params) == key]
        self.queue = [r for r in self.queue if self._settings(r.sampling_params) != key]
        pad = int(self.meta["pad_token_id"])
        width = max(self.prompt_length, max(len(r.prompt_ids) for r in batch))
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, request in enumerate(batch):
            n = len(request.prompt_ids)
            ids[i, width - n:] = torch.tensor(request.prompt_ids, dtype=torch.long)
            mask[i, width - n:] = 1
        temperature = float(key[0] or 0.0)
        meta = dict(self.meta, do_sample=temperature > 0, temperature=temperature if temperature > 0 else 1.0,
                    response_length=max(int(r.sampling_params["max_tokens"]) for r in batch))
        prompts = DataProto.from_dict(tensors={"input_ids": ids, "attention_mask": mask,
                                               "position_ids": compute_position_id_with_mask(mask)},
                                      non_tensors=self._image_inputs(batch), meta_info=meta)
        out = self.rollout.generate_sequences(prompts)
        eos = set(self.meta["eos_token_id"] if isinstance(self.meta["eos_token_id"], list)
                  else [self.meta["eos_token_id"]])
        routed = out.batch[ROUTED_EXPERTS_KEY] if ROUTED_EXPERTS_KEY in out.batch.keys() else None
        finished = []
        for i, request in enumerate(batch):
            limit = int(request.sampling_params["max_tokens"])
            n = min(int(out.batch["response_mask"][i].sum()), limit)
            tokens = out.batch["responses"][i, :n].tolist()
            log_probs = None
            if request.sampling_params.get("logprobs") is not None and "rollout_log_probs" in out.batch.keys():
                log_probs = out.batch["rollout_log_probs"][i, :n].tolist()
            reason = "stop" if tokens and tokens[-1] in eos else "length"
            experts = None
            if routed is not None:  # R3: this request's own tokens, prompt then response (no padding)
                m = len(request.prompt_ids)
                experts = torch.cat([routed[i, width - m: width], routed[i, width: width + n]]).clone()
            finished.append((request, TokenOutput(tokens, log_probs, reason, routed_experts=experts)))
        return finished

    def _image_inputs(self, batch: list[EngineRequest]) -> dict[str, np.ndarray]:
        """The ``multi_modal_inputs`` column of a batch in which some request has images or videos (else nothing)."""
        if not any(r.image_data or r.video_data for r in batch):
            return {}
        if self.processor is None or getattr(self.processor, "image_processor", None) is None:
            raise ValueError("an agent-loop request carries images (image_data) but the rollout has no multi-modal "
                             "processor; actor_rollout_ref.model.path must be a vision-language model folder")
        column = np.empty(len(batch), dtype=object)
        column[:] = [self._request_inputs(r) for r in batch]
        return {"multi_modal_inputs": column}

    def _request_inputs(self, request: EngineRequest) -> dict[str, Any]:
        inputs = {}
        if request.image_data:
            inputs.update(self.processor.image_processor(images=request.image_data, return_tensors="pt"))
        if request.video_data:
            from verl.models.video_processor import video_model_inputs

            inputs.update(video_model_inputs(self.processor, request.video_data))
        return inputs

    def _dummy_forward(self) -> None:
        """One greedy token from a one-token prompt: joins the other ranks' sharded forward passes."""
        one = torch.ones((1, 1), dtype=torch.long)
        prompts = DataProto.from_dict(
            tensors={"input_ids": one * int(self.meta["pad_token_id"]), "attention_mask": one,
                     "position_ids": torch.zeros_like(one)},
            meta_info=dict(self.meta, do_sample=False, validate=False, response_length=1))
        self.rollout.generate_sequences(prompts)

    def fail_all(self, err: BaseException) -> None:
        self.abort_all(RuntimeError(f"HF generate failed: {err!r}"))

    def abort_all(self, err: BaseException) -> None:
        """Drop every queued request (a generate call in progress always finishes); each gets ``err``."""
        for request in self.queue:
            if not request.future.done():
                request.future.set_exception(err)
        self.queue.clear()
