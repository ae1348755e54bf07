"""`actor_rollout_ref.actor.qat` (and its mirror `actor_rollout_ref.rollout.qat`): upstream's quantization-aware
training (verl.utils.qat.QATConfig). Upstream swaps the FSDP actor's linear layers for fake-quantised NVFP4 ones
(4-bit float weights in groups of `group_size`; w4a16 keeps activations in 16 bit, w4a4 quantises them too) and
serves the rollout with vLLM's compressed-tensors NVFP4 kernels, configured from `quantization_config_path`.

Not built here: every key must keep upstream's default, so none is accepted and ignored (with enable=false
upstream reads none of the others)."""

from __future__ import annotations

from dataclasses import dataclass

from verl.base_config import BaseConfig
from verl.utils.config_schema import list_field, refused

__all__ = ["QATConfig", "QAT_REFUSAL"]

QAT_REFUSAL = (
    "quantization-aware training is not built: upstream fake-quantises the actor's linear layers to NVFP4 and serves "
    "the rollout with vLLM's compressed-tensors NVFP4 (w4a16 / w4a4) kernels, which need an NVIDIA CUDA GPU; neither "
    "the quantised linear layers nor a CPU (or HF-generate) kernel for them exists here",
    "Leave every actor_rollout_ref.actor.qat key (and rollout.qat, which follows it) at its default (enable=false).",
)

QAT_IGNORE_PATTERNS = ["lm_head", "embed_tokens", "re:.*mlp.gate$"]


@dataclass
class QATConfig(BaseConfig):
    """Upstream's keys and defaults; each is refused unless at its default (see QAT_REFUSAL)."""

    enable: bool = refused(False, *QAT_REFUSAL)
    mode: str = refused("w4a16", *QAT_REFUSAL)
    group_size: int = refused(16, *QAT_REFUSAL)
    ignore_patterns: list[str] = refused(list_field(QAT_IGNORE_PATTERNS), *QAT_REFUSAL)
    activation_observer: str = refused("static_minmax", *QAT_REFUSAL)
    quantization_config_path: str | None = refused(None, *QAT_REFUSAL)
