"""The vLLM engine's sequence length against the model's, checked before Ray.

vLLM refuses to start an engine whose ``max_model_len`` exceeds what the model's config allows
(``max_position_embeddings``): without this check the run would stop only once the workers build their engines,
minutes in, with a pydantic error from inside vLLM. ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` (vLLM's own escape hatch)
lets it through here as it does there.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["vllm_length_problems"]


def vllm_length_problems(config: Any) -> list[str]:
    rollout = config.actor_rollout_ref.rollout
    if rollout.name != "vllm" or os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN") == "1":
        return []
    from transformers import AutoConfig

    from verl.models.loader import resolve_model_path

    model = config.actor_rollout_ref.model
    try:
        hf_config = AutoConfig.from_pretrained(resolve_model_path(model.path, "actor_rollout_ref.model.path"),
                                               trust_remote_code=model.trust_remote_code)
    except Exception:  # noqa: BLE001 - a bad path is reported by the model loader with its own message
        return []
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    limit = getattr(text, "max_position_embeddings", None)
    if not limit:
        return []
    if rollout.max_model_len is not None:
        wanted, where = int(rollout.max_model_len), f"actor_rollout_ref.rollout.max_model_len={rollout.max_model_len}"
    else:  # what the engine derives: prompt + response + 1 (a full sequence scored asks for one more token)
        wanted = int(config.data.max_prompt_length) + int(config.data.max_response_length) + 1
        where = (f"data.max_prompt_length + data.max_response_length + 1 = {wanted} (the engine's max_model_len "
                 "when actor_rollout_ref.rollout.max_model_len is unset)")
    if wanted <= int(limit):
        return []
    return [f"{where} exceeds the model's max_position_embeddings={limit} ({model.path}); vLLM would refuse to start "
            "the engine. Lower it, or set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 if the model's RoPE scaling holds longer "
            "sequences"]
