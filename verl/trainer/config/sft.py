"""The sft_trainer config (`python -m verl.trainer.fsdp_sft_trainer`): its sections as dataclasses.

Keys and defaults follow sft_trainer.yaml (a test checks they agree). Field metadata rejects single bad values;
`sft_problems` checks what needs several keys, the number of ranks or the machine.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from verl.trainer.config.trainer import CONSOLE_FORMATS, DEVICES, RESUME_MODES
from verl.trainer.config.ulysses_checks import check_sft_ulysses
from verl.utils.config_schema import (
    MutableConfig,
    Refusal,
    at_least,
    choice,
    dict_field,
    list_field,
    refused,
    refused_values,
)
from verl.workers.config import CheckpointConfig, FSDPEngineConfig, FSDPOptimizerConfig, MixedPrecisionConfig
from verl.workers.config.engine import CHECKPOINTING_POLICIES, DTYPES, TRAIN_STRATEGIES

# What verl.data.sft_dataset.fit_to_length does with a sample longer than data.max_length.
SFT_TRUNCATION_MODES = ("error", "left", "right")

LR_SCHEDULERS = ("cosine", "constant")
# What verl.trainer.tracking.Tracking builds; the other upstream names are refused below.
SFT_LOGGERS = ("console", "tensorboard", "wandb", "mlflow", "swanlab", "file", "jsonl")
_NO_BACKEND = "this build has no {} logger backend"
_LOGGER_TODO = "Use console, tensorboard, wandb, mlflow, swanlab or file."
LOGGER_REFUSALS = {name: Refusal(_NO_BACKEND.format(name), _LOGGER_TODO) for name in ("vemlp_wandb", "clearml")}


@dataclass
class SFTMultiTurnConfig(MutableConfig):
    enable: bool = False
    messages_key: str = "messages"
    tools_key: str = "tools"
    enable_thinking_key: str = "enable_thinking"


@dataclass
class SFTCustomClsConfig(MutableConfig):
    path: str | None = None  # a python file defining a Dataset class taking (parquet_files, tokenizer, config)
    name: str | None = None


@dataclass
class SFTDataConfig(MutableConfig):
    train_batch_size: int = at_least(16, 1)
    micro_batch_size: int | None = at_least(None, 1)  # deprecated, global; becomes micro_batch_size_per_gpu
    micro_batch_size_per_gpu: int | None = at_least(4, 1)
    train_files: str | list[str] = "~/data/arithmetic_sft/train.parquet"
    val_files: str | list[str] | None = "~/data/arithmetic_sft/test.parquet"
    prompt_key: str = "prompt"
    response_key: str = "response"
    prompt_dict_keys: list[str] | None = None
    response_dict_keys: list[str] | None = None
    multiturn: SFTMultiTurnConfig = field(default_factory=SFTMultiTurnConfig)
    # image-text rows (upstream's MultiTurnSFTDataset keys): the images column, for a vision-language model folder
    image_key: str = "images"
    video_key: str = "videos"  # the video column (<video> rows; Qwen2-VL / Qwen2.5-VL / Qwen3-VL): docs/vlm.md#videos
    max_length: int = at_least(1024, 2)
    truncation: str = choice("error", SFT_TRUNCATION_MODES)
    # Upstream's false is a per-rank token mean; here the loss is always the global token mean (upstream's true).
    balance_dp_token: bool = refused(
        True,
        "the SFT loss is always the token mean over the whole global batch, which is what balance_dp_token=true "
        "gives upstream; the per-rank mean of false is not built",
        "Remove the override (or set data.balance_dp_token=true).",
    )
    chat_template: str | None = None
    apply_chat_template_kwargs: dict[str, Any] = dict_field()
    train_max_samples: int = -1  # -1: all rows
    val_max_samples: int = -1
    custom_cls: SFTCustomClsConfig = field(default_factory=SFTCustomClsConfig)
    use_shm: bool = refused(False, "copying the data to shared memory is not built",
                            "Remove data.use_shm; the parquet files are read from disk.")


@dataclass
class SFTWrapPolicyConfig(MutableConfig):
    min_num_params: int = refused(
        0, "FSDP here always shards per decoder layer, then the root; size-based wrapping is not built",
        "Remove model.fsdp_config.wrap_policy.min_num_params.")


@dataclass
class SFTFSDPConfig(MutableConfig):
    model_dtype: str = choice("fp32", DTYPES)
    wrap_policy: SFTWrapPolicyConfig = field(default_factory=SFTWrapPolicyConfig)
    cpu_offload: bool = False  # upstream's two names for FSDP parameter offloading (GPU only)
    offload_params: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1  # -1: shard over all ranks; smaller: HSDP (replicate x shard)
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)

    def to_engine(self) -> FSDPEngineConfig:
        """The shared FSDPEngineConfig that apply_fsdp2 reads."""
        return FSDPEngineConfig(param_offload=self.cpu_offload or self.offload_params,
                          reshard_after_forward=self.reshard_after_forward, fsdp_size=self.fsdp_size,
                          model_dtype=self.model_dtype, mixed_precision=dataclasses.replace(self.mixed_precision))


@dataclass
class SFTModelConfig(MutableConfig):
    partial_pretrain: str | None = None  # None: the bundled default model
    use_shm: bool = refused(False, "loading the model through shared memory is not built",
                            "Remove model.use_shm; the model is read from disk.")
    fsdp_config: SFTFSDPConfig = field(default_factory=SFTFSDPConfig)
    external_lib: str | None = None
    override_config: dict[str, Any] = dict_field()
    enable_gradient_checkpointing: bool = True
    gradient_checkpointing_policy: str = choice("auto", CHECKPOINTING_POLICIES)  # ours, as the PPO actor's
    trust_remote_code: bool = False
    lora_rank: int = at_least(0, 0)  # > 0 trains a LoRA adapter
    lora_alpha: int = 16
    target_modules: str | list[str] = "all-linear"
    use_liger: bool = refused(False, "liger kernels are not built", "Set model.use_liger=false.")
    strategy: str = choice("fsdp2", TRAIN_STRATEGIES)  # both use FSDP2's fully_shard


@dataclass
class SFTOptimConfig(MutableConfig):
    lr: float = 1e-5
    betas: list[float] = list_field([0.9, 0.95])
    weight_decay: float = 0.01
    warmup_steps_ratio: float = 0.1
    clip_grad: float = 1.0
    lr_scheduler: str = choice("cosine", LR_SCHEDULERS)
    min_lr_ratio: float = 0.0

    def to_engine(self, total_training_steps: int) -> FSDPOptimizerConfig:
        """The shared FSDPOptimizerConfig that build_optimizer / build_lr_scheduler read."""
        return FSDPOptimizerConfig(lr=self.lr, betas=list(self.betas), weight_decay=self.weight_decay, lr_warmup_steps=-1,
                           lr_warmup_steps_ratio=self.warmup_steps_ratio, lr_scheduler_type=self.lr_scheduler,
                           min_lr_ratio=self.min_lr_ratio, total_training_steps=total_training_steps)


@dataclass
class SFTTrainerSection(MutableConfig):
    default_local_dir: str = "checkpoints/arithmetic-sft/smollm2-135m"
    default_hdfs_dir: str | None = refused(None, "copying checkpoints to HDFS is not built",
                                           "Leave trainer.default_hdfs_dir=null and copy trainer.default_local_dir.")
    project_name: str = "arithmetic-sft"
    experiment_name: str = "smollm2-135m"
    total_epochs: int = 1
    total_training_steps: int | None = at_least(None, 1)  # None: total_epochs x steps per epoch
    logger: list[str] = refused_values(list_field(["console"], SFT_LOGGERS), LOGGER_REFUSALS)
    console_format: str = choice("compact", CONSOLE_FORMATS)  # ours: see the ppo trainer section
    seed: int = 1
    save_freq: int = -1  # -1: only at the end
    test_freq: int = -1
    nnodes: int = at_least(1, 1)
    n_gpus_per_node: int = at_least(1, 1)
    # with Ray workers (trainer.nnodes x n_gpus_per_node > 1): seconds their start-up may take. fit() is one call
    # for the whole run; a rank that hangs there stalls the others in a collective, and its timeout ends the run.
    ray_wait_register_center_timeout: int | None = at_least(300, 1)
    max_ckpt_to_keep: int | None = at_least(None, 1)  # None: keep all
    resume_mode: str = choice("auto", RESUME_MODES)
    resume_from_path: str | None = None
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    device: str = choice("auto", DEVICES)
    report_dir: str = "checkpoints/arithmetic-sft/smollm2-135m/report"


@dataclass
class SFTRayKwargsConfig(MutableConfig):
    # ray.init keyword arguments, used only when the ranks start as Ray workers; any ray.init argument.
    ray_init: dict[str, Any] = dict_field({"num_cpus": None, "object_store_memory": None, "include_dashboard": False})


@dataclass
class SFTTrainerConfig(MutableConfig):
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    model: SFTModelConfig = field(default_factory=SFTModelConfig)
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    # Ulysses: each packed row split over sp consecutive ranks; data parallelism over world / sp (verl.utils.ulysses)
    ulysses_sequence_parallel_size: int = at_least(1, 1)
    use_remove_padding: bool = True  # upstream's default (its hf_model.yaml); false pads every row
    trainer: SFTTrainerSection = field(default_factory=SFTTrainerSection)
    ray_kwargs: SFTRayKwargsConfig = field(default_factory=SFTRayKwargsConfig)


# ---------------------------------------------------------------- checks across keys


def sft_data_parallel_size(config: SFTTrainerConfig, world: int) -> int:
    """Ranks that read different samples: the ranks of one Ulysses group share theirs."""
    sp = config.ulysses_sequence_parallel_size
    return world // sp if world % sp == 0 else world


def with_micro_batch_per_gpu(config: SFTTrainerConfig, world: int) -> SFTTrainerConfig:
    """A copy in which the deprecated global data.micro_batch_size fills an unset micro_batch_size_per_gpu."""
    data = config.data
    if data.micro_batch_size_per_gpu is not None or data.micro_batch_size is None:
        return config
    per_gpu = max(1, data.micro_batch_size // sft_data_parallel_size(config, world))
    return dataclasses.replace(config, data=dataclasses.replace(data, micro_batch_size_per_gpu=per_gpu))


def _batch_problems(data: SFTDataConfig, world: int, sp: int = 1) -> list[str]:
    micro, total = data.micro_batch_size_per_gpu, data.train_batch_size
    if micro is None:
        return ["data.micro_batch_size_per_gpu is null and so is data.micro_batch_size; set "
                "data.micro_batch_size_per_gpu"]
    if world % sp:
        return []  # reported by check_sft_ulysses
    ranks = "ranks" if sp == 1 else "data-parallel ranks (ranks / ulysses_sequence_parallel_size)"
    dp = world // sp
    if total % dp:
        return [f"data.train_batch_size={total} must be divisible by the {dp} {ranks}"]
    if (total // dp) % micro:
        return [f"data.train_batch_size / {ranks} = {total // dp} must be divisible by "
                f"data.micro_batch_size_per_gpu={micro}"]
    return []


def _local_files(key: str, files: str | list[str] | None) -> list[str]:
    problems = []
    for path in [files] if isinstance(files, str) else list(files or []):
        if "://" in path:
            problems.append(f"{key}: remote path {path!r} is not supported; copy the file to local disk")
        elif not os.path.exists(os.path.expanduser(path)):
            problems.append(f"{key}: parquet file {path!r} does not exist")
    return problems


def sft_file_problems(config: SFTTrainerConfig) -> list[str]:
    problems = _local_files("data.train_files", config.data.train_files)
    problems += _local_files("data.val_files", config.data.val_files)
    trainer = config.trainer
    if trainer.resume_mode == "resume_path" and trainer.resume_from_path is not None:
        if not os.path.isdir(os.path.expanduser(trainer.resume_from_path)):
            problems.append(f"trainer.resume_from_path={trainer.resume_from_path!r} is not a folder")
    return problems


def sft_problems(config: SFTTrainerConfig, world: int) -> list[str]:
    """Problems that need more than one key (or the machine) to see."""
    import torch

    problems = _batch_problems(config.data, world, config.ulysses_sequence_parallel_size)
    problems += check_sft_ulysses(config, world)
    if not config.data.train_files:
        problems.append("data.train_files is not set: point it at a parquet file "
                        "(see examples/data_preprocess/arithmetic_sft.py)")
    if config.model.lora_rank > 0 and config.model.lora_alpha <= 0:
        problems.append(f"model.lora_alpha must be > 0, got {config.model.lora_alpha}")
    optim = config.optim
    if optim.lr <= 0:
        problems.append(f"optim.lr must be > 0, got {optim.lr}")
    if not 0.0 <= optim.warmup_steps_ratio <= 1.0:
        problems.append(f"optim.warmup_steps_ratio must be in [0, 1], got {optim.warmup_steps_ratio}")
    trainer = config.trainer
    if trainer.total_epochs < 1 and trainer.total_training_steps is None:
        problems.append(f"trainer.total_epochs must be >= 1, got {trainer.total_epochs}")
    if trainer.resume_mode == "resume_path" and not trainer.resume_from_path:
        problems.append("trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_N folder)")
    for key in ("save_contents", "load_contents"):
        if "model" not in getattr(trainer.checkpoint, key):
            problems.append(f"trainer.checkpoint.{key} must contain 'model': the checkpoint is the HF model folder")
    if trainer.device == "cuda" and not torch.cuda.is_available():
        problems.append("trainer.device=cuda but no GPU is visible; set trainer.device=auto or cpu")
    return problems
