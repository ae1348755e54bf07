"""Rollout with the vLLM offline engine living in the actor's process (verl's hybrid engine).

One engine per rollout data-parallel rank (per tensor-parallel group when ``tensor_model_parallel_size`` > 1). The
engine keeps its own copy of the weights (in ``rollout.dtype``); ``update_weights`` overwrites it in memory from HF
names and tensors, which the FSDP sharding manager gathers after every actor update. The output batch has the
same keys and layout as the HF rollout's, plus ``rollout_log_probs`` (the sampled tokens' log-probs as vLLM computed
them, per ``rollout.logprobs_mode``: by default log_softmax(logits / T), truncated by top-k/top-p) when
``calculate_log_probs`` is on, and ``routed_experts`` with ``enable_rollout_routing_replay`` (R3, on a GPU:
verl.workers.rollout.vllm.routing).

Vision-language models (Qwen2-VL / Qwen2.5-VL): a row's images (the ``multi_modal_data`` column, {"image": [PIL]})
go to vLLM's multi-modal prompt with the row's tokens, its image tokens collapsed to one per image; vLLM expands
them again with the folder's image processor, and the expansion must equal the data's (the actor's). Responses
continue the prompts' (bs, 4, P) position ids by 1, 2, ... on every axis, as the HF rollout's do, and never sample a
vision token (a logit bias, as the HF rollout and the actor suppress them). ``compute_log_prob`` scores with vLLM's
prompt log-probs, which no bias reaches: for a VLM they differ from the actor's by the vision tokens' share.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

import torch

from verl.data.vision import response_position_ids
from verl.models.router_replay import ROUTED_EXPERTS_KEY
from verl.protocol import DataProto
from verl.utils.device import get_device_name
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.prometheus import MetricsEndpoint, node_address
from verl.workers.rollout.seeding import SamplingSeeds, seeded
from verl.workers.rollout.vllm.batching import prompt_token_lists, response_log_prob_rows, responses_to_batch
from verl.workers.rollout.vllm.engine import (
    build_llm,
    engine_kwargs,
    engine_placement,
    engine_threads,
    inner_worker,
    prepare_engine,
    rollout_core,
)
from verl.workers.rollout.vllm.kv_cache import KVCacheSleeper
from verl.workers.rollout.vllm.routing import batch_routing
from verl.workers.rollout.vllm.sampling import sampling_kwargs
from verl.workers.rollout.vllm.vision import (
    check_expansion,
    engine_prompt,
    is_vision_config,
    row_images,
    vision_token_bias,
    with_logit_bias,
)

logger = logging.getLogger(__name__)

__all__ = ["vLLMRollout", "WeightSyncError"]


class WeightSyncError(RuntimeError):
    """The engine did not take every weight it was given (or took none): its samples would be off-policy."""


class _ReloadWarnings(logging.Handler):
    """Collects vLLM's 'weights were not loaded' warning, which it logs instead of raising."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "not loaded" in message:
            self.messages.append(message)


class vLLMRollout(BaseRollout):  # noqa: N801 - upstream's public name
    """``config`` is ``actor_rollout_ref.rollout`` (a RolloutConfig). ``local_rank`` / ``local_world_size`` place the engine's
    threads on a core of its own when the node has one per rank; ``seed`` (+ rank) seeds the engine, and ``seed`` with
    the data-parallel rank every sampled request's own generator (verl.workers.rollout.seeding);
    ``trust_remote_code`` is ``actor_rollout_ref.model.trust_remote_code``, for the engine's own model load."""

    # a text model's values; __init__ sets a vision model's (image token id, the vision tokens' logit bias)
    vision = False
    image_token_id: int | None = None
    vision_bias: dict[int, float] = {}

    def __init__(self, model_path: str, config: RolloutConfig, tokenizer=None, model_hf_config=None, *, rank: int = 0,
                 local_rank: int = 0, local_world_size: int = 1, seed: int = 0,
                 trust_remote_code: bool = False) -> None:
        super().__init__()
        self.config = config
        self.tokenizer = tokenizer
        if model_hf_config is None:
            from transformers import AutoConfig

            model_hf_config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        self.model_hf_config = model_hf_config
        self.tied_embeddings = bool(getattr(model_hf_config, "tie_word_embeddings", False))
        self.vision = is_vision_config(model_hf_config)
        self.image_token_id = getattr(model_hf_config, "image_token_id", None) if self.vision else None
        self.vision_bias = vision_token_bias(model_hf_config)  # responses never sample a vision token
        on_cpu = get_device_name() == "cpu"
        self.core = rollout_core(local_rank, local_world_size) if on_cpu else None
        self.threads = engine_threads()
        kwargs = engine_kwargs(config, model_path, model_hf_config, seed=seed + rank,
                               engines_per_node=max(1, local_world_size), trust_remote_code=trust_remote_code)
        start = time.perf_counter()
        with engine_placement(self.core, self.threads):
            prepare_engine(kwargs, model_hf_config)
            self.llm = build_llm(kwargs)
        self.engine_start_s = time.perf_counter() - start
        self.engine_kwargs = kwargs
        self.worker = inner_worker(self.llm)
        self.sleeper = KVCacheSleeper(self.llm, self.worker, on_cpu=on_cpu,
                                      enabled=config.free_cache_engine)
        self.needs_weights = kwargs["load_format"] == "dummy"
        self.seeds = SamplingSeeds(seed, dp_rank=rank // max(1, int(config.tensor_model_parallel_size)))
        self.last_sync_s = 0.0
        kv = kwargs.get("kv_cache_memory_bytes")
        logger.info("vLLM engine up in %.1fs (rank %d, dtype %s%s, core %s, %s threads)", self.engine_start_s, rank,
                    kwargs["dtype"], f", KV cache {kv / 2**20:.0f} MiB" if kv else "", self.core, self.threads)
        # vLLM zero-fills the whole KV cache at start; give it back until the first rollout needs it
        self.sleeper.sleep()
        # rollout.prometheus: this process's registry, where the engine records its metrics, served for scraping
        self.metrics_endpoint = self.metrics_address = None
        if config.prometheus.enable:
            self.metrics_endpoint = MetricsEndpoint()
            self.metrics_address = self.metrics_endpoint.start(node_address())
            logger.info("vLLM metrics (rank %d) at http://%s/metrics", rank, self.metrics_address)

    # -- generation -----------------------------------------------------------------------------------------------

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        from vllm import SamplingParams

        self._require_weights()
        meta = prompts.meta_info
        params = with_logit_bias(sampling_kwargs(self.config, meta), self.vision_bias)
        pad_token_id = meta.get("pad_token_id")
        if pad_token_id is None:
            raise KeyError("generate_sequences: meta_info['pad_token_id'] is missing; the trainer sets it from the tokenizer")
        idx = prompts.batch["input_ids"]
        prompt_mask = prompts.batch["attention_mask"]
        tokens = prompt_token_lists(idx, prompt_mask)
        requests = self._requests(tokens, prompts.non_tensor_batch.get("multi_modal_data"))
        call = self.seeds.next_call(meta)  # every row its own seed: a resumed run samples the same tokens
        per_request = [SamplingParams(**seeded(params, call.seed(row))) for row in range(len(requests))]
        with engine_placement(self.core, self.threads):
            outputs = self.llm.generate(requests, per_request, use_tqdm=False)
        self._check_expansions(tokens, requests, outputs)
        responses = [list(o.outputs[0].token_ids) for o in outputs]
        log_probs = None
        if "logprobs" in params:
            log_probs = [_sampled_log_probs(o.outputs[0]) for o in outputs]
        out = responses_to_batch(idx, prompt_mask, responses, log_probs, params["max_tokens"], int(pad_token_id))
        if getattr(self.config, "enable_rollout_routing_replay", False):  # R3: vLLM's record of every token's experts
            out.batch[ROUTED_EXPERTS_KEY] = batch_routing([o.outputs[0] for o in outputs], [len(t) for t in tokens],
                                                          [len(r) for r in responses], idx.size(1),
                                                          params["max_tokens"])
        prompt_positions = prompts.batch["position_ids"] if "position_ids" in prompts.batch.keys() else None
        if prompt_positions is not None and prompt_positions.dim() == 3:  # Qwen-VL's (bs, 4, P): text + mrope rows
            out.batch["position_ids"] = torch.cat(
                [prompt_positions, response_position_ids(prompt_positions, params["max_tokens"])], dim=-1)
        return out

    def _requests(self, tokens: list[list[int]], images_column) -> list[dict]:
        """vLLM token prompts for the rows; a row with images (``multi_modal_data``) gets them along."""
        if images_column is not None and len(images_column) != len(tokens):
            raise ValueError(f"generate_sequences: multi_modal_data has {len(images_column)} rows for "
                             f"{len(tokens)} prompts")
        requests = []
        for row, ids in enumerate(tokens):
            images = row_images(images_column, row)
            if images and not self.vision:
                raise ValueError(f"generate_sequences: row {row} carries images (multi_modal_data) but the rollout "
                                 "model is text-only; actor_rollout_ref.model.path must be a vision-language model")
            requests.append(engine_prompt(ids, images, self.image_token_id))
        return requests

    @staticmethod
    def _check_expansions(tokens: list[list[int]], requests: list[dict], outputs) -> None:
        for row, (ids, request, out) in enumerate(zip(tokens, requests, outputs)):
            if "multi_modal_data" in request:
                check_expansion(ids, out.prompt_token_ids, f"generate_sequences row {row}")

    def compute_log_prob(self, data: DataProto) -> torch.Tensor:
        """The engine's log-probs (T = 1) of the given responses: (bs, response_length), zero beyond the mask.

        A fixed sequence scored here and by the actor must agree up to precision once the weights are synced —
        the check that the hybrid engine really samples from the policy being trained."""
        from vllm import SamplingParams

        self._require_weights()
        sequences, counts = response_log_prob_rows(data)
        requests = self._requests(sequences, data.non_tensor_batch.get("multi_modal_data"))
        params = SamplingParams(n=1, max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False)
        with engine_placement(self.core, self.threads):
            outputs = self.llm.generate(requests, params, use_tqdm=False)
        self._check_expansions(sequences, requests, outputs)
        response_length = data.batch["responses"].size(1)
        result = torch.zeros((len(sequences), response_length), dtype=torch.float32)
        for row, (seq, n, out) in enumerate(zip(sequences, counts, outputs)):
            scored = out.prompt_logprobs  # entry t scores token t given tokens < t; entry 0 is None
            for j in range(n):
                t = len(seq) - n + j
                result[row, j] = scored[t][seq[t]].logprob
        return result

    # -- weights and memory ---------------------------------------------------------------------------------------

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Overwrite the engine's weights from (HF name, full tensor) pairs, consumed one at a time, then drop every
        cached prefix (its KV was computed with the old weights). Raises WeightSyncError if vLLM skipped any."""
        start = time.perf_counter()
        watcher = _ReloadWarnings()
        reload_logger = logging.getLogger("vllm.model_executor.model_loader.reload.inplace")
        reload_logger.addHandler(watcher)
        saved_level = reload_logger.level
        if reload_logger.getEffectiveLevel() > logging.WARNING:  # the user silenced vLLM; we still need to know
            reload_logger.setLevel(logging.WARNING)
        pushed = 0

        def counted():
            nonlocal pushed
            for item in named_tensors:
                pushed += 1
                yield item

        try:
            with engine_placement(self.core, self.threads):
                self.worker.reload_weights(weights_iterator=counted())
        finally:
            reload_logger.removeHandler(watcher)
            reload_logger.setLevel(saved_level)
        if watcher.messages or pushed == 0:
            raise WeightSyncError("vLLM did not load every weight pushed from the actor "
                                  f"({pushed} tensors given): {' | '.join(watcher.messages) or 'none given'}. "
                                  "The names must be the HF model's (model.layers.N...., lm_head.weight).")
        self.llm.reset_prefix_cache()
        if self.vision:
            # vLLM's reload clears the runner's encoder outputs but not the scheduler's record of them (the next
            # image it thinks cached is a "cache miss"), and both would hold embeddings of the old vision tower
            self.llm.llm_engine.reset_encoder_cache()
            self.llm.reset_mm_cache()
        self.needs_weights = False
        self.last_sync_s = time.perf_counter() - start

    def sleep(self) -> None:
        self.sleeper.sleep()

    def wake_up(self) -> None:
        self.sleeper.wake_up()

    def wake_up_weights(self) -> None:
        self.sleeper.wake_up_weights()

    def shutdown(self) -> None:
        """Stop the engine now (else at interpreter exit). vLLM's teardown also destroys torch.distributed's default
        process group, which it shares with FSDP: call this only when the process is done with both."""
        self.llm.llm_engine.engine_core.shutdown()
        endpoint = getattr(self, "metrics_endpoint", None)
        if endpoint is not None:
            endpoint.stop()

    def _require_weights(self) -> None:
        if self.needs_weights:
            raise RuntimeError(f"the vLLM engine was started with load_format={self.engine_kwargs['load_format']!r} "
                               "(random weights) and has not been synced from the actor yet; generate inside the "
                               "sharding manager (`with sharding_manager: ...`)")


def _sampled_log_probs(completion) -> list[float]:
    steps = completion.logprobs
    if steps is None:
        raise RuntimeError("vLLM returned no log-probs although calculate_log_probs is on")
    return [steps[i][tok].logprob for i, tok in enumerate(completion.token_ids)]
