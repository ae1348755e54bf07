"""verl's sampling keys -> vLLM ``SamplingParams`` arguments (plain dicts, so they are testable without vLLM).

Same rules as the HF rollout: ``meta_info['validate']`` switches to ``val_kwargs``; ``do_sample=False`` or a zero
temperature is greedy; ``top_k=-1`` is off. One sample per request: the trainer has already repeated every prompt
``rollout.n`` times, so ``n`` is applied upstream of the engine.
"""

from __future__ import annotations

from typing import Any

from verl.workers.config import RolloutConfig

__all__ = ["sampling_kwargs", "eos_ids"]


def eos_ids(meta: dict) -> list[int]:
    value = meta.get("eos_token_id")
    if value is None:
        raise KeyError("generate_sequences: meta_info['eos_token_id'] is missing; the trainer sets it from the tokenizer")
    return [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]


def sampling_kwargs(config: RolloutConfig, meta: dict) -> dict[str, Any]:
    """``config`` is the RolloutConfig; ``meta`` the prompts' meta_info."""
    validate = bool(meta.get("validate", False))
    source = "val_kwargs." if validate else ""
    sampling = config.val_kwargs if validate else config
    do_sample = bool(meta.get("do_sample", sampling.do_sample))
    temperature = float(sampling.temperature if validate else meta.get("temperature", sampling.temperature))
    top_k, top_p = sampling.top_k, sampling.top_p
    response_length = int(meta.get("response_length", config.response_length))
    if response_length < 1:
        raise ValueError(f"rollout.response_length must be >= 1, got {response_length}")
    if temperature < 0:
        raise ValueError(f"rollout {source}temperature must be >= 0, got {temperature}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"rollout {source}top_p must be in (0, 1], got {top_p}")
    ignore_eos = config.ignore_eos
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
    if config.calculate_log_probs:
        kwargs["logprobs"] = 0  # the sampled token's own log-prob only
    return kwargs
