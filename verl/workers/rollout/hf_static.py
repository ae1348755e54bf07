"""HF ``generate`` with a static KV cache and a compiled decode step (CUDA graphs): what ``rollout.name=hf`` runs
with ``rollout.enforce_eager=false`` on a CUDA device (the key means the same as for vLLM: capture the decode step
instead of launching every kernel from Python).

Why a replica: on a small model HF's eager decode is launch-bound (~37 ms a step for SmolLM2-135M's shape on an
H100, most of it Python and FSDP2's per-unit hooks), and a CUDA graph can neither run FSDP2's hooks nor follow its
gathered weights, whose storage is freed and re-allocated between rollouts while a captured graph reads fixed
addresses. So the decoder is a hook-free copy of the actor in the dtype the actor computes in, whose weights are
copied in place (device to device, no collective) before every generate, as vLLM's weights are.

Why padded rows: the compiled step and its static cache are shaped by the batch size, so every call pads its rows
up to the largest batch seen so far (a power of two) with copies of its last prompt, and the agent loop's smaller
trailing batches reuse the graph instead of compiling another; on a launch-bound model 3 rows decode as fast as 128.
"""

from __future__ import annotations

import copy
import logging

import torch
from transformers import GenerationConfig, LogitsProcessorList

from verl.models.lora import is_peft_model

logger = logging.getLogger(__name__)

__all__ = ["StaticCacheDecoder", "hf_name", "unsupported_reason"]

# prefixes that wrappers (torch.compile, activation checkpointing, FSDP1) add to parameter names
_WRAPPER_PREFIXES = ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")


def hf_name(name: str) -> str:
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def _hf_class(module: torch.nn.Module) -> type:
    """The transformers class under FSDP2's dynamic ``FSDP<Class>`` subclass."""
    return next(cls for cls in type(module).__mro__ if not cls.__name__.startswith("FSDP"))


def unsupported_reason(module: torch.nn.Module) -> str | None:
    """Why ``module`` cannot be decoded by a static-cache replica (None when it can)."""
    if is_peft_model(module):
        return "the actor is a LoRA (peft) model"
    config = getattr(module, "config", None)
    if config is None or not hasattr(module, "generate"):
        return f"{type(module).__name__} is not a transformers generation model"
    if getattr(config, "vision_config", None) is not None:
        return "vision-language models decode eagerly (their image inputs change the prefill)"
    if getattr(config, "is_encoder_decoder", False):
        return "encoder-decoder models are not supported"
    if not getattr(_hf_class(module), "_can_compile_fullgraph", False):
        return f"{_hf_class(module).__name__} does not support a static cache (_can_compile_fullgraph is False)"
    return None


def _local_full(param: torch.Tensor) -> torch.Tensor:
    """The full tensor without a collective: a plain (gathered) tensor, or a DTensor on a one-rank mesh."""
    from torch.distributed.tensor import DTensor

    if not isinstance(param, DTensor):
        return param.detach()
    if param.device_mesh.size() != 1:
        raise RuntimeError("the actor's weights are sharded; the static-cache decoder copies them inside the "
                           "rollout's sharding manager, where FSDP2 holds them gathered")
    return param.detach().to_local()


class StaticCacheDecoder:
    """A replica of ``module`` for ``generate`` with ``cache_implementation="static"``; ``compile`` turns on
    transformers' compiled decode step (``CompileConfig``: inductor, mode reduce-overhead, i.e. CUDA graphs)."""

    def __init__(self, module: torch.nn.Module, device: torch.device, compile: bool,
                 capture_sizes: list[int] | None = None) -> None:
        reason = unsupported_reason(module)
        if reason is not None:
            raise ValueError(f"static-cache decoding is not available: {reason}")
        self.device = device
        self.compile = compile
        # rollout.cudagraph_capture_sizes: the padded row counts to use instead of powers of two
        self.capture_sizes = sorted(int(s) for s in capture_sizes) if capture_sizes else None
        self.rows = 0  # the padded batch size the compiled step has seen
        sources = {hf_name(n): p for n, p in module.named_parameters()}
        dtype = next(iter(sources.values())).dtype
        config = copy.deepcopy(module.config)
        config._attn_implementation = "sdpa"  # the actor may run a packed (varlen) wrapper; decoding needs none
        with torch.device("meta"):
            replica = _hf_class(module)(config)
        replica.to(dtype=dtype)
        replica.to_empty(device=device)
        if hasattr(replica, "tie_weights"):
            replica.tie_weights()  # to_empty gives every module its own tensor; the tied LM head is one again
        replica.eval().requires_grad_(False)
        self.model = replica
        targets = dict(replica.named_parameters())
        missing = sorted(set(targets) - set(sources))
        extra = sorted(set(sources) - set(targets))
        if missing or extra:
            raise ValueError(f"static-cache decoding: the replica's parameters differ from the actor's "
                             f"(missing {missing[:3]}, unexpected {extra[:3]})")
        # buffers (rotary inv_freq, ...) keep the actor's values and dtype: copied once, they never train
        buffers = {hf_name(n): b for n, b in module.named_buffers()}
        for name, _ in list(replica.named_buffers()):
            if name not in buffers:
                raise ValueError(f"static-cache decoding: the actor has no buffer {name!r} to copy")
            owner_name, _, leaf = name.rpartition(".")
            owner = replica.get_submodule(owner_name) if owner_name else replica
            owner._buffers[leaf] = _local_full(buffers[name]).to(device, copy=True)
        self.sync(module)

    @property
    def compiled(self) -> bool:
        """Whether transformers compiled the decode step (it does so at the first decode on an accelerator)."""
        return getattr(self.model, "_compiled_call", None) is not None

    @torch.no_grad()
    def sync(self, module: torch.nn.Module) -> None:
        """Copy the actor's current weights into the replica in place (the captured graph's addresses stay)."""
        targets = dict(self.model.named_parameters())
        for name, param in module.named_parameters():
            targets[hf_name(name)].copy_(_local_full(param), non_blocking=True)

    def _generation_config(self, generation_config: GenerationConfig) -> GenerationConfig:
        from transformers import CompileConfig

        config = copy.deepcopy(generation_config)
        config.cache_implementation = "static"
        config.disable_compile = not self.compile
        if self.compile:
            config.compile_config = CompileConfig()  # transformers' default: inductor, mode reduce-overhead
        return config

    def padded_rows(self, real: int) -> int:
        """The smallest capture size that holds ``real`` rows (powers of two without rollout.cudagraph_capture_sizes,
        or above its largest size)."""
        fits = [size for size in self.capture_sizes or () if size >= real]
        return fits[0] if fits else 1 << (real - 1).bit_length()

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, generation_config: GenerationConfig,
                 logits_processor: LogitsProcessorList) -> torch.Tensor:
        """``generate``'s sequences, padding rows included (they come last: the caller keeps the first
        ``input_ids.size(0)`` rows of these and of what ``logits_processor`` recorded)."""
        real = input_ids.size(0)
        self.rows = max(self.rows, self.padded_rows(real))
        if self.rows > real:
            fill = self.rows - real
            input_ids = torch.cat([input_ids, input_ids[-1:].expand(fill, -1)])
            attention_mask = torch.cat([attention_mask, attention_mask[-1:].expand(fill, -1)])
        sequences = self.model.generate(input_ids=input_ids.to(self.device),
                                        attention_mask=attention_mask.to(self.device),
                                        generation_config=self._generation_config(generation_config),
                                        logits_processor=logits_processor)
        return sequences
