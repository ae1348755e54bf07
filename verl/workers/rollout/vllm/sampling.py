"""verl's sampling keys -> vLLM ``SamplingParams`` arguments (plain dicts, so they are testable without vLLM).

Same rules as the HF rollout: ``meta_info['validate']`` switches to ``val_kwargs``; ``do_sample=False`` or a zero
temperature is greedy; ``top_k=-1`` is off. One sample per request: the trainer has already repeated every prompt
``rollout.n`` times, so ``n`` is applied upstream of the engine.
"""

from __future__ import annotations

from typing import Any

from verl.utils.config import cfg_select

__all__ = ["sampling_kwargs", "eos_ids"]


def eos_ids(meta: dict) -> list[int]:
    value = meta.get("eos_token_id")
    if value is None:
        raise KeyError("generate_sequences: meta_info['eos_token_id'] is missing; the trainer sets it from the tokenizer")
    return [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]


def sampling_kwargs(config, meta: dict) -> dict[str, Any]:
    validate = bool(meta.get("validate", False))
    source = "val_kwargs." if validate else ""
    do_sample = bool(meta.get("do_sample", cfg_select(config, source + "do_sample", True)))
    if validate:
        temperature = float(cfg_select(config, "val_kwargs.temperature", 0.0))
    else:
        temperature = float(meta.get("temperature", cfg_select(config, "temperature", 1.0)))
    top_k = int(cfg_select(config, source + "top_k", -1))
    top_p = float(cfg_select(config, source + "top_p", 1.0))
    response_length = int(meta.get("response_length", cfg_select(config, "response_length")))
    if response_length < 1:
        raise ValueError(f"rollout.response_length must be >= 1, got {response_length}")
    if temperature < 0:
        raise ValueError(f"rollout {source}temperature must be >= 0, got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"rollout {source}top_p must be in (0, 1], got {top_p}")
    ignore_eos = bool(cfg_select(config, "ignore_eos", False))
    kwargs: dict[str, Any] = dict(
        n=1,
        max_tokens=response_length,
        ignore_eos=ignore_eos,
        # meta's EOS ids (tokenizer + generation config) end a response even when the engine's tokenizer knows fewer
        stop_token_ids=[] if ignore_eos else eos_ids(meta),
        detokenize=False,
        skip_special_tokens=False,
    )
    if not do_sample or temperature == 0.0:
        kwargs.update(temperature=0.0, top_p=1.0, top_k=-1)
    else:
        kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else -1)
    if bool(cfg_select(config, "calculate_log_probs", False)):
        kwargs["logprobs"] = 0  # the sampled token's own log-prob only
    return kwargs
