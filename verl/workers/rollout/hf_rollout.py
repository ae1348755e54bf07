"""Rollout with HF ``generate`` on the training module itself (no weight copy: samples the current weights).

Under FSDP2 every decode step all-gathers the sharded weights, so all ranks must run the same number of forward
steps: with more than one process we pass ``synced_gpus=True`` and every rank keeps stepping until all of its
peers are done. Ranks must get the same number of rows (the worker group's equal chunking does that) so they
make the same number of micro-batch ``generate`` calls.

Vision-language prompts (Qwen2-VL / Qwen2.5-VL): the rows' ``multi_modal_inputs`` (pixel_values, image_grid_thw, a
non-tensor column) go to ``generate`` concatenated in row order, with the image tokens marked (mm_token_type_ids)
so HF computes the same 3-D rope positions the data made; the prompts' (bs, 4, P) position ids are continued on
every axis over the response, so the batch the actor recomputes log-probs on is the one that was sampled.
"""

from __future__ import annotations

import contextlib
import logging

import torch
import torch.distributed as dist
from tensordict import TensorDict
from transformers import (
    GenerationConfig,
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from verl.data.vision import response_position_ids
from verl.models.router_replay import NOT_ROUTED, ROUTED_EXPERTS_KEY, RouterReplay, generation_record
from verl.models.vision import suppress_vision_tokens, vision_token_ids
from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask, get_response_mask
from verl.workers.config import RolloutConfig
from verl.workers.micro_batching import module_device
from verl.workers.rollout.base import BaseRollout
from verl.workers.vision_rows import MEDIA_INPUT_KEYS

__all__ = ["HFRollout"]

logger = logging.getLogger(__name__)


def sampling_warpers(generation_config: GenerationConfig) -> list[LogitsProcessor]:
    """The warpers HF ``generate`` samples through, in its order (temperature, top-k, top-p); none when greedy."""
    if not generation_config.do_sample:
        return []
    warpers: list[LogitsProcessor] = []
    if generation_config.temperature is not None and generation_config.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(generation_config.temperature))
    if generation_config.top_k:
        warpers.append(TopKLogitsWarper(top_k=generation_config.top_k))
    if generation_config.top_p is not None and generation_config.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=generation_config.top_p))
    return warpers


class _SampledLogProbs(LogitsProcessor):
    """Records the sampled token's log-prob at every step, as vLLM's ``logprobs_mode`` (rollout.logprobs_mode)
    defines it. ``warpers`` empty: raw_logprobs, log_softmax(logits) (or processed_logprobs when greedy, where
    vLLM applies no temperature either); else processed_logprobs, the log_softmax of the distribution sampled from:
    the logits after ``sampling_warpers`` (temperature, then top-k and top-p, truncated tokens at -inf).

    transformers runs custom processors before its own warpers, so this one sees the logits and applies the same
    warpers to a copy. The token drawn from step t's scores is only known at step t+1 (it is then the last input
    id), so one (bs, V) row of log-probs is kept pending; ``finish`` resolves the final step from the returned
    sequences.
    """

    def __init__(self, prompt_length: int, warpers: list[LogitsProcessor]) -> None:
        self.prompt_length = prompt_length
        self.warpers = warpers
        self.pending: torch.Tensor | None = None
        self.columns: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.pending is not None:
            self.columns.append(self.pending.gather(-1, input_ids[:, -1:]).squeeze(-1))
        processed = scores.float()
        for warper in self.warpers:  # HF's warpers return new tensors: the scores generate samples from are kept
            processed = warper(input_ids, processed)
        self.pending = torch.log_softmax(processed, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        last = self.prompt_length + len(self.columns)
        if self.pending is not None and sequences.size(1) > last:
            self.columns.append(self.pending.gather(-1, sequences[:, last : last + 1]).squeeze(-1))
        self.pending = None
        if not self.columns:
            return sequences.new_zeros((sequences.size(0), 0), dtype=torch.float32)
        return torch.stack(self.columns, dim=1)


class _NoVisionTokens(LogitsProcessor):
    """A VLM's response never samples a vision token (verl.models.vision.SUPPRESSED_LOGIT says why); runs before
    ``_SampledLogProbs``, so the recorded log-probs are of the distribution the actor recomputes."""

    def __init__(self, token_ids: list[int]) -> None:
        self.token_ids = token_ids

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return suppress_vision_tokens(scores, self.token_ids)


class HFRollout(BaseRollout):
    """``config`` is the ``actor_rollout_ref.rollout`` section (a RolloutConfig): temperature, top_k (-1 = off), top_p,
    do_sample, response_length, val_kwargs {temperature, top_k, top_p, do_sample}, calculate_log_probs (also return
    ``rollout_log_probs`` of the sampled tokens, as ``logprobs_mode`` says: processed_logprobs, vLLM's and upstream's
    default, is the log_softmax of the distribution sampled from, logits / T truncated by top-k/top-p (T = 1 and no
    truncation when greedy; without top-k/top-p it is the actor's log_softmax(logits / T)); raw_logprobs is
    log_softmax(logits), before temperature, top-k/top-p and the VLM's vision-token suppression).
    ``scheduling_policy``: generate has no scheduler, each call is one batch in order (fcfs); priority is refused.
    ``rollout.n`` is not applied here: the trainer repeats prompts first. ``micro_batch_size``: rows per ``generate``
    call (None: the whole batch).

    ``static_cache``: decode text prompts with a static KV cache on a hook-free replica of the module
    (verl.workers.rollout.hf_static), compiled to CUDA graphs on a GPU. None (the worker's choice) turns it on where
    a CUDA device computes and ``enforce_eager`` is false; a model it cannot serve, or a failure to compile, falls
    back to eager decoding with one warning that says why (``static_cache_off`` keeps the reason)."""

    def __init__(self, module: torch.nn.Module, config: RolloutConfig, micro_batch_size: int | None = None,
                 static_cache: bool | None = None) -> None:
        super().__init__()
        self.module = module
        self.config = config
        self.micro_batch_size = micro_batch_size
        if config.ignore_eos:
            raise ValueError("rollout.ignore_eos=True is not supported by the hf rollout (rollout.name=hf); "
                             "set it to false or use rollout.name=vllm")
        if config.logprobs_mode not in ("processed_logprobs", "raw_logprobs"):
            raise ValueError(f"actor_rollout_ref.rollout.logprobs_mode={config.logprobs_mode}: the hf rollout computes "
                             "log-probs only (processed_logprobs or raw_logprobs)")
        if config.scheduling_policy != "fcfs":
            raise ValueError(f"actor_rollout_ref.rollout.scheduling_policy={config.scheduling_policy}: the hf rollout "
                             "has no request scheduler (one batched generate call, in order: fcfs); set "
                             "scheduling_policy=fcfs, or use rollout.name=vllm")
        if static_cache is None:
            static_cache = module_device(module).type == "cuda" and not config.enforce_eager
        if config.cudagraph_capture_sizes and not static_cache:
            raise ValueError(f"actor_rollout_ref.rollout.cudagraph_capture_sizes={list(config.cudagraph_capture_sizes)}"
                             ": the hf rollout captures CUDA graphs only with enforce_eager=false on a CUDA device "
                             f"({'enforce_eager is true' if config.enforce_eager else 'no CUDA device computes'}); "
                             "remove it (or set it to null).")
        self.static_cache = static_cache
        self._off_reason = "rollout.enforce_eager is true or no CUDA device computes"
        self._decoder = None
        # R3 (rollout.enable_rollout_routing_replay): record every token's MoE experts while generating; the
        # static-cache replica has no router hooks, so decoding is eager
        self._routing = RouterReplay.of(module) if config.enable_rollout_routing_replay else None
        if self._routing is not None and self.static_cache:
            self.static_cache = False
            self._off_reason = "rollout.enable_rollout_routing_replay records routing on the module's own forwards"

    @property
    def static_cache_off(self) -> str | None:
        """Why decoding is eager (None while the static-cache decoder is on)."""
        return None if self.static_cache else self._off_reason

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        batch_size = len(prompts)
        micro_batch_size = self.micro_batch_size or batch_size
        outputs = [self._generate_micro_batch(chunk) for chunk in prompts.split(max(1, micro_batch_size))]
        return DataProto.concat(outputs)

    def _processors(self, recorder: _SampledLogProbs | None) -> LogitsProcessorList:
        vision_ids = vision_token_ids(getattr(self.module, "config", None))
        suppress = [_NoVisionTokens(vision_ids)] if vision_ids else []
        record = [recorder] if recorder is not None else []
        # raw log-probs are of the bare logits, as vLLM computes them before its logit bias (the suppression)
        return LogitsProcessorList(record + suppress if self.config.logprobs_mode == "raw_logprobs"
                                   else suppress + record)

    def _recorder(self, prompt_length: int, generation_config: GenerationConfig) -> _SampledLogProbs | None:
        if not self.config.calculate_log_probs:
            return None
        raw = self.config.logprobs_mode == "raw_logprobs"
        return _SampledLogProbs(prompt_length, [] if raw else sampling_warpers(generation_config))

    def _generation_config(self, meta: dict) -> GenerationConfig:
        """Sampling settings: val_kwargs when meta_info['validate']; greedy when do_sample is off or T == 0."""
        validate = bool(meta.get("validate", False))
        source = "val_kwargs." if validate else ""
        sampling = self.config.val_kwargs if validate else self.config
        do_sample = meta.get("do_sample", sampling.do_sample)
        temperature = float(sampling.temperature if validate else meta.get("temperature", sampling.temperature))
        top_k, top_p = sampling.top_k, sampling.top_p
        response_length = int(meta.get("response_length", self.config.response_length))
        if response_length < 1:
            raise ValueError(f"rollout.response_length must be >= 1, got {response_length}")
        eos_token_id = _require_meta(meta, "eos_token_id")
        pad_token_id = _require_meta(meta, "pad_token_id")
        # Every field generate would otherwise take from the model's generation_config.json is set explicitly,
        # so a checkpoint's chat defaults (e.g. repetition_penalty) do not change what PPO samples.
        common = dict(max_new_tokens=response_length, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
                      use_cache=True, num_beams=1, num_return_sequences=1, repetition_penalty=1.0,
                      no_repeat_ngram_size=0, min_new_tokens=0)
        if not do_sample or temperature == 0.0:
            return GenerationConfig(do_sample=False, **common)
        if temperature < 0:
            raise ValueError(f"rollout {source}temperature must be >= 0, got {temperature}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"rollout {source}top_p must be in (0, 1], got {top_p}")
        return GenerationConfig(do_sample=True, temperature=temperature, top_p=top_p,
                                top_k=top_k if top_k > 0 else 0, **common)

    def _generate_micro_batch(self, prompts: DataProto) -> DataProto:
        meta = prompts.meta_info
        generation_config = self._generation_config(meta)
        response_length = generation_config.max_new_tokens
        pad_token_id = generation_config.pad_token_id
        idx = prompts.batch["input_ids"]
        prompt_mask = prompts.batch["attention_mask"]
        out_device = idx.device
        device = module_device(self.module)
        synced = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        prompt_length = idx.size(1)
        recorder = self._recorder(prompt_length, generation_config)
        processors = self._processors(recorder)
        vision = self._vision_inputs(prompts, idx, device)
        decoder = None if vision else self._static_decoder(device)
        sequences = None
        if decoder is not None:
            try:
                sequences = decoder.generate(idx, prompt_mask, generation_config, processors)
            except Exception as err:  # noqa: BLE001 - any compile/capture failure: say why, decode eagerly
                self._turn_off_static_cache(f"generate failed: {err!r}")
                recorder = self._recorder(prompt_length, generation_config)
                processors = self._processors(recorder)
        if sequences is None:
            was_training = self.module.training
            self.module.eval()
            try:
                with torch.no_grad(), self._recording() as records:
                    sequences = self.module.generate(input_ids=idx.to(device), attention_mask=prompt_mask.to(device),
                                                     generation_config=generation_config, synced_gpus=synced,
                                                     logits_processor=processors, **vision)
            finally:
                self.module.train(was_training)
        rows = idx.size(0)  # the static decoder pads rows at the end; keep the real ones
        sampled_log_probs = recorder.finish(sequences)[:rows].to(out_device) if recorder is not None else None
        sequences = sequences[:rows].to(out_device)
        responses = sequences[:, prompt_length:]
        if responses.size(1) < response_length:  # every row stopped early: pad to the fixed width
            fill = responses.new_full((responses.size(0), response_length - responses.size(1)), pad_token_id)
            responses = torch.cat([responses, fill], dim=1)
        response_mask = get_response_mask(responses, generation_config.eos_token_id, dtype=prompt_mask.dtype)
        # Tokens after the first EOS are generate's padding (or junk): make them pad ids so the batch is canonical.
        responses = torch.where(response_mask.bool(), responses, torch.full_like(responses, pad_token_id))
        attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
        tensors = {
            "prompts": idx,
            "responses": responses,
            "input_ids": torch.cat([idx, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": self._position_ids(prompts, attention_mask, response_length),
            "response_mask": response_mask,
        }
        if self._routing is not None:  # (bs, P + R, moe layers, k) over the tokens the model was fed
            routed = generation_record(records, idx.size(0), sequences.size(1) - 1, prompt_length + response_length)
            tensors[ROUTED_EXPERTS_KEY] = routed.cpu().masked_fill(~attention_mask.bool().cpu()[..., None, None],
                                                                   NOT_ROUTED).to(out_device)
        if sampled_log_probs is not None:
            padded = sampled_log_probs.new_zeros(responses.shape)
            padded[:, : sampled_log_probs.size(1)] = sampled_log_probs
            # zero (not 0 * value) after EOS: those steps scored pad tokens fed to finished rows
            tensors["rollout_log_probs"] = torch.where(response_mask.bool(), padded, torch.zeros_like(padded))
        return DataProto(batch=TensorDict(tensors, batch_size=[idx.size(0)]))

    def _recording(self):
        return self._routing.record() if self._routing is not None else contextlib.nullcontext([])

    def _static_decoder(self, device: torch.device):
        """The static-cache replica with the module's current weights, or None (eager decoding)."""
        if not self.static_cache:
            return None
        try:
            if self._decoder is None:
                from verl.workers.rollout.hf_static import StaticCacheDecoder

                self._decoder = StaticCacheDecoder(self.module, device, compile=device.type == "cuda",
                                                   capture_sizes=self.config.cudagraph_capture_sizes)
                logger.warning("hf rollout: decoding with a static KV cache%s (rollout.enforce_eager=false)",
                               " and CUDA graphs" if device.type == "cuda" else "")
            else:
                self._decoder.sync(self.module)
        except (ValueError, RuntimeError) as err:
            self._turn_off_static_cache(str(err))
            return None
        return self._decoder

    def _turn_off_static_cache(self, reason: str) -> None:
        logger.warning("hf rollout: static-cache decoding is off, decoding eagerly: %s", reason)
        self.static_cache, self._off_reason, self._decoder = False, reason, None

    @staticmethod
    def _position_ids(prompts: DataProto, attention_mask: torch.Tensor, response_length: int) -> torch.Tensor:
        """(bs, P + R): from the mask, as the actor's text path makes them; a VLM batch's (bs, 4, P) prompt
        positions (text row + mrope rows) continue by 1, 2, ... on every axis, as HF's decoding steps did."""
        prompt_positions = prompts.batch["position_ids"] if "position_ids" in prompts.batch.keys() else None
        if prompt_positions is None or prompt_positions.dim() != 3:
            return compute_position_id_with_mask(attention_mask)
        prompt_positions = prompt_positions.to(attention_mask.device)
        return torch.cat([prompt_positions, response_position_ids(prompt_positions, response_length)], dim=-1)

    def _vision_inputs(self, prompts: DataProto, idx: torch.Tensor, device: torch.device) -> dict[str, torch.Tensor]:
        """generate's image kwargs for the rows' ``multi_modal_inputs`` (none when no row has an image)."""
        rows = prompts.non_tensor_batch.get("multi_modal_inputs")
        if rows is None:
            return {}
        kwargs = {}
        for key in MEDIA_INPUT_KEYS:  # images, and videos (with Qwen2.5-VL's second_per_grid_ts)
            parts = [torch.as_tensor(row[key]).reshape(-1) if key == "second_per_grid_ts" else torch.as_tensor(row[key])
                     for row in rows if row and row.get(key) is not None]
            if parts:
                kwargs[key] = torch.cat(parts).to(device)
        if "image_grid_thw" not in kwargs and "video_grid_thw" not in kwargs:
            return {}
        config = getattr(self.module, "config", None)
        image_token_id, video_token_id = getattr(config, "image_token_id", None), getattr(config, "video_token_id", None)
        if image_token_id is None or ("video_grid_thw" in kwargs and video_token_id is None):
            raise ValueError("generate_sequences: the batch carries images or videos (multi_modal_inputs) but the "
                             "rollout model's config has no image_token_id / video_token_id; use a vision-language "
                             "model folder")
        types = (idx == int(image_token_id)).int()  # 1 = image token, 2 = video token
        if video_token_id is not None:
            types = types + 2 * (idx == int(video_token_id)).int()
        kwargs["mm_token_type_ids"] = types.to(device)
        return kwargs


def _require_meta(meta: dict, key: str):
    if meta.get(key) is None:
        raise KeyError(f"generate_sequences: meta_info[{key!r}] is missing; the trainer sets it from the tokenizer")
    return meta[key]
