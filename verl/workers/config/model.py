"""The model section (`actor_rollout_ref.model`): upstream's HFModelConfig."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.base_config import BaseConfig
from verl.utils.config_schema import at_least, choice, dict_field, list_field, refused
from verl.workers.config.engine import CHECKPOINTING_POLICIES

# Shared by the model sections of the actor and the critic (critic.py imports them).
NO_EXTERNAL_LIB = (
    "importing a module before loading the model is built for the SFT trainer only",
    "Remove it; use a model folder whose classes transformers knows (model.trust_remote_code=true for code "
    "shipped with the model).",
)


@dataclass
class MtpConfig(BaseConfig):
    """Upstream's multi-token-prediction (MTP) section (`model.mtp`, and `rollout.mtp`, which follows it): a
    model's extra next-next-token layers (DeepSeek-V3's ``num_nextn_predict_layers``, MiMo, Qwen3.5's
    ``mtp_num_hidden_layers``). ``enable`` loads and saves them; ``enable_train`` adds their loss
    (``mtp_loss_scaling_factor``, ``detach_encoder``); ``enable_rollout`` uses them as the draft model of the
    engine's speculative decoding (vLLM: ``method``, ``num_speculative_tokens``; SGLang: the ``speculative_*``
    keys). Only the defaults are accepted here: see MTP_REFUSAL."""

    enable: bool = False
    enable_train: bool = False
    enable_rollout: bool = False
    detach_encoder: bool = False
    mtp_loss_scaling_factor: float = 0.1
    speculative_algorithm: str = "EAGLE"
    speculative_num_steps: int = 3
    speculative_eagle_topk: int = 1
    speculative_num_draft_tokens: int = 4
    method: str = "mtp"
    num_speculative_tokens: int = 1


# Shared by model.mtp and rollout.mtp (rollout.py imports it).
MTP_REFUSAL = (
    "multi-token prediction is not built: upstream trains MTP layers only with its Megatron engine (mbridge) on "
    "NVIDIA GPUs; the FSDP actor here loads the model through transformers, which has no MTP layers (it drops "
    "num_nextn_predict_layers / mtp_num_hidden_layers weights), so there is nothing to train, save or hand to vLLM "
    "as the draft model of its speculative decoding",
    "Leave every model.mtp key (actor_rollout_ref.model.mtp, which rollout.mtp follows, and critic.model.mtp) at "
    "its default (enable=false).",
)


# Shared by the model sections of the actor and the critic: upstream's Megatron-Bridge LoRA (`model.lora`)
MEGATRON_LORA_REFUSAL = (
    "model.lora configures upstream's Megatron-Core LoRA (Megatron-Bridge's LoRA / DoRA / canonical-LoRA adapters "
    "on Megatron's fused linear_qkv / linear_proj / linear_fc1 / linear_fc2 layers, used by its Megatron engine); "
    "neither Megatron-Core nor Megatron-Bridge is built here, so none of these keys would be read",
    "Leave every model.lora key at its default (rank=0); with FSDP, LoRA is model.lora_rank / lora_alpha / "
    "target_modules / exclude_modules / lora_adapter_path (peft, docs/lora.md).",
)
MEGATRON_LORA_TARGETS = ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"]


@dataclass
class MegatronLoraConfig(BaseConfig):
    """`model.lora` (upstream after v0.7): the Megatron engine's LoRA through Megatron-Bridge. `type` picks the
    adapter (lora | dora | canonical_lora), `rank` > 0 turns it on, `merge` folds it into the base weights for the
    rollout, the freeze_* keys choose what of a VLM stays frozen. Each key refused unless at its default
    (MEGATRON_LORA_REFUSAL); the FSDP LoRA here is the section's lora_rank / lora_alpha / target_modules keys."""

    type: str = refused("lora", *MEGATRON_LORA_REFUSAL)
    merge: bool = refused(False, *MEGATRON_LORA_REFUSAL)
    rank: int = refused(0, *MEGATRON_LORA_REFUSAL)
    alpha: int = refused(32, *MEGATRON_LORA_REFUSAL)
    dropout: float = refused(0.0, *MEGATRON_LORA_REFUSAL)
    target_modules: list[str] = refused(list_field(MEGATRON_LORA_TARGETS), *MEGATRON_LORA_REFUSAL)
    exclude_modules: list[str] = refused(list_field([]), *MEGATRON_LORA_REFUSAL)
    dropout_position: str = refused("pre", *MEGATRON_LORA_REFUSAL)  # pre | post
    lora_A_init_method: str = refused("xavier", *MEGATRON_LORA_REFUSAL)  # noqa: N815 (upstream's key)
    lora_B_init_method: str = refused("zero", *MEGATRON_LORA_REFUSAL)  # noqa: N815 (upstream's key)
    a2a_experimental: bool = refused(False, *MEGATRON_LORA_REFUSAL)
    dtype: str | None = refused(None, *MEGATRON_LORA_REFUSAL)
    adapter_path: str | None = refused(None, *MEGATRON_LORA_REFUSAL)
    freeze_vision_model: bool = refused(True, *MEGATRON_LORA_REFUSAL)
    freeze_vision_projection: bool = refused(True, *MEGATRON_LORA_REFUSAL)
    freeze_language_model: bool = refused(True, *MEGATRON_LORA_REFUSAL)


@dataclass
class TiledMlpConfig(BaseConfig):
    """`model.tiled_mlp` (upstream v0.7): the decoder's dense MLPs run over `num_shards` slices of the tokens, the
    backward recomputing slice by slice (verl.models.tiled_mlp): less activation memory, same outputs."""

    enabled: bool = False
    num_shards: int = at_least(4, 1)


# Shared by the model sections of the actor and the critic
LIGER_REFUSAL = ("Liger kernels are GPU kernels this build does not include", "Set it to false.")
FUSED_KERNELS_REFUSAL = ("the fused GPU log-prob kernels are not built (on CPU the fused RMSNorm/rotary are on "
                         "already; VERL_FUSED_NORM_ROPE=0 turns them off)", "Set it to false.")


@dataclass
class FusedKernelOptions(BaseConfig):
    """`model.fused_kernel_options`: upstream's backend of the fused log-prob kernels (use_fused_kernels)."""

    impl_backend: str = refused("torch", "it picks the backend of the fused GPU log-prob kernels, which are not "
                                "built (model.use_fused_kernels is refused)", "Remove it.")


@dataclass
class HFModelConfig(BaseConfig):
    """`actor_rollout_ref.model`: the policy's HF model folder (or hub id), LoRA and the memory knobs."""

    # resolved on the driver: the bundled default model / a /dev/shm copy, and checkpointing's auto policy
    _mutable_fields = frozenset({"path", "gradient_checkpointing_policy"})

    path: str | None = None  # None: the bundled default model (verl.utils.default_model)
    # upstream's: the folder whose config.json builds the model (the weights still come from path); None: path
    hf_config_path: str | None = None
    # upstream's: the folder of the tokenizer (and a VLM's processor) the trainer and workers use; None: path
    tokenizer_path: str | None = None
    custom_chat_template: str | None = None
    external_lib: str | None = refused(None, *NO_EXTERNAL_LIB)
    override_config: dict[str, Any] = dict_field()
    enable_gradient_checkpointing: bool = True  # upstream's default; docs/performance.md#defaults has its cost here
    # ours (upstream has no key): which activations checkpointing keeps; auto is selective on CPU, full on GPU
    gradient_checkpointing_policy: str = choice("auto", CHECKPOINTING_POLICIES)
    # what the decoder layers save for backward moves to host memory in the training forward (all but the last
    # layer), with gradient checkpointing as set above (verl.models.activation_offload); on a CPU nothing moves
    enable_activation_offload: bool = False
    use_remove_padding: bool = True  # upstream's default: pack the real tokens, no padding in the forward
    # LoRA (peft, verl.models.lora): > 0 trains an adapter of this rank on the actor; the reference policy is
    # then the same module with the adapter disabled (docs/lora.md)
    lora_rank: int = at_least(0, 0)
    lora_alpha: int = 16  # the adapter's output is scaled by lora_alpha / lora_rank
    target_modules: str | list[str] = "all-linear"  # peft's names: all-linear, or [q_proj, v_proj, ...]
    exclude_modules: str | list[str] | None = None  # peft's: module names (or a regex) never adapted
    lora_adapter_path: str | None = None  # a saved peft adapter folder to start from instead of a fresh adapter
    use_shm: bool = False  # copy the model folder to /dev/shm once on the driver; every worker loads that copy
    trust_remote_code: bool = False
    use_liger: bool = refused(False, *LIGER_REFUSAL)
    use_fused_kernels: bool = refused(False, *FUSED_KERNELS_REFUSAL)
    # upstream: the fused log-prob kernels' backend (torch | triton); only read with use_fused_kernels
    fused_kernel_options: FusedKernelOptions = field(default_factory=lambda: FusedKernelOptions())
    tiled_mlp: TiledMlpConfig = field(default_factory=TiledMlpConfig)  # verl.models.tiled_mlp
    mtp: MtpConfig = refused(field(default_factory=MtpConfig), *MTP_REFUSAL)
    lora: MegatronLoraConfig = field(default_factory=MegatronLoraConfig)  # Megatron's LoRA: refused unless default
