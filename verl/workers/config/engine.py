"""The FSDP engine section (upstream's verl.workers.config.FSDPEngineConfig: `fsdp_config` of the actor, the
reference, the critic and the reward model), its mixed precision and wrap policy, and checkpoint contents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig
from verl.utils.config_schema import Refusal, at_least, choice, dict_field, list_field, refused, refused_values
from verl.workers.config.qat import QAT_IGNORE_PATTERNS, QAT_REFUSAL

DTYPES = ("fp32", "float32", "bf16", "bfloat16", "fp16", "float16")
_SAME_DTYPE = {"fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16"}
CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")
TRAIN_STRATEGIES = ("fsdp", "fsdp2")
# gradient_checkpointing_policy (ours): what checkpointing keeps (verl.models.checkpoint_policy); auto resolves per device
CHECKPOINTING_POLICIES = ("auto", "full", "selective")
MEGATRON_REFUSAL = Refusal(
    "the Megatron-LM backend (tensor, pipeline and expert parallelism, mcore checkpoints) is not built",
    "Use strategy=fsdp2: FSDP2 shards parameters, gradients and optimizer state over all ranks, "
    "ulysses_sequence_parallel_size splits long sequences, model.lora_rank trains an adapter; see docs/scaling.md "
    "(Megatron).",
)


def train_strategy(default: str = "fsdp"):
    """A trained role's `strategy`: fsdp or fsdp2 (both FSDP2); `megatron`, upstream's other backend, refused with
    what to use instead rather than as an unknown name."""
    return refused_values(choice(default, TRAIN_STRATEGIES), {"megatron": MEGATRON_REFUSAL})


def check_one_micro_batch_size(use_dynamic_bsz: bool, global_size: int | None, per_gpu: int | None, key: str) -> None:
    """Upstream's rule for a role's micro-batch size: the deprecated global `key` and `key_per_gpu` are not both
    set (ValueError, as upstream). With use_dynamic_bsz micro-batches are cut by token count, so neither is read."""
    if use_dynamic_bsz or global_size is None or per_gpu is None:
        return
    raise ValueError(
        f"You have set both {key}={global_size} (the deprecated global size) AND {key}_per_gpu={per_gpu}; keep one: "
        f"remove {key}, or set {key}_per_gpu=null to have the global size divided by the data-parallel size. "
        f"(Built in Python, {key}_per_gpu defaults to 2: pass {key}_per_gpu=None with {key}.)"
    )


@dataclass
class WrapPolicyConfig(BaseConfig):
    # Upstream: a positive number wraps any module with at least that many parameters.
    min_num_params: int = refused(
        0,
        "only per-decoder-layer wrapping is built (every layer is one FSDP2 unit, the model the root)",
        "Remove it; the layer wrapping is what 0 means.",
    )


@dataclass
class MixedPrecisionConfig(BaseConfig):
    _mutable_fields = frozenset({"param_dtype"})  # null is resolved to the hardware's dtype on the driver

    # null: compute in the hardware's dtype (bf16 where native: CUDA, AVX512-BF16, AMX; fp32 where bf16 would be
    # emulated), resolved once on the driver and logged; upstream's unset mixed_precision computes in bf16.
    param_dtype: str | None = choice(None, DTYPES)
    reduce_dtype: str = choice("fp32", DTYPES)
    buffer_dtype: str = refused(
        choice("fp32", DTYPES),
        "FSDP2's mixed precision has no buffer dtype; buffers keep the model's dtype (fsdp_config.model_dtype)",
        "Remove it, or set fsdp_config.model_dtype.",
    )


# the engine's copy of the actor's qat section: the same NVFP4 fake-quantisation, so the same reason it is missing
QAT_ENGINE_REFUSAL = (
    QAT_REFUSAL[0],
    "Leave every fsdp_config.qat key (of the actor, the reference, the critic and the reward model) at its default "
    "(enable=false).",
)


@dataclass
class QATEngineConfig(BaseConfig):
    """`fsdp_config.qat` (upstream after v0.7, verl.workers.config.QATEngineConfig): quantization-aware training
    configured on the engine instead of the role (`actor.qat`); the rollout's qat follows the actor's. Same keys
    and defaults as verl.workers.config.qat.QATConfig, each refused unless at its default (QAT_ENGINE_REFUSAL)."""

    enable: bool = refused(False, *QAT_ENGINE_REFUSAL)
    mode: str = refused("w4a16", *QAT_ENGINE_REFUSAL)  # w4a16 | w4a4
    group_size: int = refused(16, *QAT_ENGINE_REFUSAL)
    ignore_patterns: list[str] = refused(list_field(QAT_IGNORE_PATTERNS), *QAT_ENGINE_REFUSAL)
    activation_observer: str = refused("static_minmax", *QAT_ENGINE_REFUSAL)
    quantization_config_path: str | None = refused(None, *QAT_ENGINE_REFUSAL)


@dataclass
class FSDPEngineConfig(BaseConfig):
    """`fsdp_config` of every FSDP-trained or evaluated role: FSDP2 (`fully_shard`) over all ranks.

    strategy / use_orig_params / forward_prefetch are upstream's engine keys: fsdp and fsdp2 both mean FSDP2
    here; the other two are FSDP1 options FSDP2 has no use for, accepted with a one-line note
    (verl.trainer.config.upstream_keys). The SFT trainer builds one from its own section, fsdp_size included."""

    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = refused(
        False,
        "not built: CPU offload follows param_offload / optimizer_offload (and does nothing on a CPU-only machine)",
        "Use fsdp_config.param_offload=true instead.",
    )
    reshard_after_forward: bool = True
    # -1: shard over every rank of the role; smaller: HSDP, world / fsdp_size replicas of fsdp_size-rank shards
    # (checked to divide the world before Ray: verl.trainer.config.hsdp_checks)
    fsdp_size: int = -1
    forward_prefetch: bool = False  # FSDP1's; FSDP2 prefetches the next layer itself (a note when true)
    strategy: str = train_strategy("fsdp")
    use_orig_params: bool = False
    model_dtype: str = choice("fp32", DTYPES)
    # Upstream's engine copies of the role keys of the same names: one setting with them, settled before Ray
    # (verl.trainer.config.engine_mirror): the one changed from its default applies, two different values are
    # refused. forward_only: whether the role only runs forward passes (the reference: always; actor, critic: never).
    ulysses_sequence_parallel_size: int = 1
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = at_least(2048, 1)  # upstream after v0.7
    use_torch_compile: bool = True
    entropy_checkpointing: bool = False
    # upstream after v0.7: pad each packed (use_remove_padding) micro-batch up to a multiple of the bucket, so the model
    # sees a few fixed lengths (verl.models.packing.length_bucket; under Ulysses rounded up to a multiple of the SP
    # size). The actor's and reference's pad_to_length is the same setting as their role key.
    pad_to_length: bool = False
    pad_to_length_bucket: int = at_least(1024, 1)
    forward_only: bool = False
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)
    # upstream's: the worker seeds torch, numpy and random with it (plus the rank for the actor and the reference)
    # before building the role's model, so a freshly initialised head and the update's dropout repeat from run to run
    seed: int = 42
    # upstream's: torch's deterministic algorithms in the worker (torch.use_deterministic_algorithms, cuDNN
    # deterministic, CUBLAS_WORKSPACE_CONFIG), seeded with `seed`: reproducible, slower (verl.utils.determinism)
    full_determinism: bool = False
    # upstream's FSDP compute dtype (its MixedPrecisionPolicy's param_dtype when mixed_precision is unset), so the
    # same setting as mixed_precision.param_dtype: one given applies to both, two different ones are refused.
    # null (ours; upstream: bfloat16): the hardware's dtype, bf16 only where it is native
    dtype: str | None = choice(None, DTYPES)
    qat: QATEngineConfig = field(default_factory=QATEngineConfig)  # refused unless at its defaults

    def __post_init__(self) -> None:
        mp = self.mixed_precision
        if self.dtype is None or mp.param_dtype is None:
            given = self.dtype if self.dtype is not None else mp.param_dtype
            object.__setattr__(self, "dtype", given)  # both read the same; written once, while being built
            mp.param_dtype = given
        elif _SAME_DTYPE[self.dtype] != _SAME_DTYPE[mp.param_dtype]:
            raise ValueError(f"fsdp_config.dtype={self.dtype} and fsdp_config.mixed_precision.param_dtype="
                             f"{mp.param_dtype} are the same setting (the FSDP compute dtype); give one, or the "
                             "same dtype to both.")


@dataclass
class CheckpointConfig(BaseConfig):
    save_contents: list[str] = list_field(["model", "optimizer", "extra"], CHECKPOINT_CONTENTS)
    load_contents: list[str] = list_field(["model", "optimizer", "extra"], CHECKPOINT_CONTENTS)
    # upstream: save in the background (Megatron's dist checkpointing only)
    async_save: bool = refused(False, "saving checkpoints in the background is not built (upstream has it for "
                               "Megatron's dist checkpointing only)", "Remove it; checkpoints are saved in the step.")
    # upstream v0.7: Megatron-Bridge's options for saving / loading HF-format checkpoints from Megatron models
    mbridge_config: dict[str, Any] = refused(dict_field(), "it configures Megatron-Bridge (mbridge), the HF <-> Megatron "
                                             "weight converter of upstream's Megatron engine, which is not built here",
                                             "Remove it: FSDP checkpoints are torch.distributed shards (add hf_model "
                                             "to save_contents for a plain HF folder).")
    # upstream after v0.7: whether a resume must match every saved model tensor to a parameter
    strict: bool = refused(True, "a resume here loads the checkpoint's model state whole (torch.distributed.checkpoint "
                           "shards, every saved tensor onto its parameter) or stops; loading the part that matches a "
                           "changed model and skipping the rest is not built", "Leave it true; to start a changed model "
                           "from saved weights, save hf_model (save_contents) and point model.path at that folder.")
