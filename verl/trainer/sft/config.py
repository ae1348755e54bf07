"""Checking a composed sft_trainer config before any process group, model or data is touched.

Every problem is reported at once, each with its full dotted key. Batch sizes are also normalised here (the
deprecated global `data.micro_batch_size` becomes `micro_batch_size_per_gpu`).
"""

from __future__ import annotations

import os

from omegaconf import DictConfig, ListConfig, open_dict

from verl.data.sft_dataset import SFT_TRUNCATION_MODES
from verl.trainer.config.errors import ConfigError

RESUME_MODES = ("auto", "disable", "resume_path")
LR_SCHEDULERS = ("cosine", "constant")
CHECKPOINT_CONTENTS = ("model", "optimizer", "extra", "hf_model")


def as_list(value) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


def sft_world_size(config: DictConfig) -> int:
    """Ranks of the run: torchrun's WORLD_SIZE when launched by it, else nnodes x n_gpus_per_node."""
    if "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    return int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)


def _local_files(key: str, files) -> list[str]:
    problems = []
    for path in as_list(files):
        path = str(path)
        if "://" in path:
            problems.append(f"{key}: remote path {path!r} is not supported; copy the file to local disk")
        elif not os.path.exists(os.path.expanduser(path)):
            problems.append(f"{key}: parquet file {path!r} does not exist")
    return problems


def _batch_problems(config: DictConfig, world: int) -> list[str]:
    data = config.data
    problems = []
    if data.get("micro_batch_size") and not data.get("micro_batch_size_per_gpu"):
        with open_dict(data):
            data.micro_batch_size_per_gpu = max(1, int(data.micro_batch_size) // world)
    micro = int(data.get("micro_batch_size_per_gpu") or 0)
    total = int(data.train_batch_size)
    if micro < 1:
        problems.append(f"data.micro_batch_size_per_gpu must be >= 1, got {micro}")
    if total < 1:
        problems.append(f"data.train_batch_size must be >= 1, got {total}")
    elif total % world:
        problems.append(f"data.train_batch_size={total} must be divisible by the {world} ranks")
    elif micro >= 1 and (total // world) % micro:
        problems.append(f"data.train_batch_size / ranks = {total // world} must be divisible by "
                        f"data.micro_batch_size_per_gpu={micro}")
    return problems


def _data_problems(config: DictConfig) -> list[str]:
    data = config.data
    problems = _local_files("data.train_files", data.train_files) if data.get("train_files") else [
        "data.train_files is not set: point it at a parquet file (see examples/data_preprocess/arithmetic_sft.py)"]
    if data.get("val_files"):
        problems += _local_files("data.val_files", data.val_files)
    if str(data.truncation) not in SFT_TRUNCATION_MODES:
        problems.append(f"data.truncation={data.truncation!r} must be one of {list(SFT_TRUNCATION_MODES)}")
    if int(data.max_length) < 2:
        problems.append(f"data.max_length must be >= 2, got {data.max_length}")
    for key in ("prompt_dict_keys", "response_dict_keys"):
        value = data.get(key)
        if value is not None and not isinstance(value, list | ListConfig | str):
            problems.append(f"data.{key} must be a list of field names like ['question'], got {value!r}")
    return problems


def _model_problems(config: DictConfig) -> list[str]:
    model = config.model
    problems = []
    if int(model.get("lora_rank", 0) or 0) < 0:
        problems.append(f"model.lora_rank must be >= 0 (0 trains the full model), got {model.lora_rank}")
    if int(model.get("lora_rank", 0) or 0) > 0 and float(model.get("lora_alpha", 16)) <= 0:
        problems.append(f"model.lora_alpha must be > 0, got {model.lora_alpha}")
    if str(model.get("strategy", "fsdp2")) not in ("fsdp", "fsdp2"):
        problems.append(f"model.strategy={model.strategy!r}: only fsdp / fsdp2 (both use FSDP2's fully_shard)")
    if model.get("use_liger", False):
        problems.append("model.use_liger=True is not supported here (no liger kernels); set it to false")
    if int(config.get("ulysses_sequence_parallel_size", 1) or 1) != 1:
        problems.append("ulysses_sequence_parallel_size > 1 is not supported here; set it to 1 "
                        "(use_remove_padding=true packs sequences instead)")
    return problems


def _optim_problems(config: DictConfig) -> list[str]:
    optim = config.optim
    problems = []
    if str(optim.get("lr_scheduler", "cosine")) not in LR_SCHEDULERS:
        problems.append(f"optim.lr_scheduler={optim.lr_scheduler!r} must be one of {list(LR_SCHEDULERS)}")
    if not 0.0 <= float(optim.get("warmup_steps_ratio", 0.0)) <= 1.0:
        problems.append(f"optim.warmup_steps_ratio must be in [0, 1], got {optim.warmup_steps_ratio}")
    if float(optim.lr) <= 0:
        problems.append(f"optim.lr must be > 0, got {optim.lr}")
    return problems


def _trainer_problems(config: DictConfig) -> list[str]:
    from verl.trainer.tracking import SUPPORTED_BACKENDS

    trainer = config.trainer
    problems = []
    mode = str(trainer.get("resume_mode", "auto"))
    if mode not in RESUME_MODES:
        problems.append(f"trainer.resume_mode={mode!r} must be one of {list(RESUME_MODES)}")
    if mode == "resume_path":
        path = trainer.get("resume_from_path")
        if not path:
            problems.append("trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_N folder)")
        elif not os.path.isdir(os.path.expanduser(str(path))):
            problems.append(f"trainer.resume_from_path={path!r} is not a folder")
    unknown = [b for b in as_list(trainer.logger) if b not in SUPPORTED_BACKENDS]
    if unknown:
        problems.append(f"trainer.logger: unknown backend(s) {unknown}; known: {list(SUPPORTED_BACKENDS)}")
    if int(trainer.total_epochs) < 1 and not trainer.get("total_training_steps"):
        problems.append(f"trainer.total_epochs must be >= 1, got {trainer.total_epochs}")
    checkpoint = trainer.get("checkpoint") or {}
    for key in ("save_contents", "load_contents"):
        bad = [c for c in as_list(checkpoint.get(key)) if c not in CHECKPOINT_CONTENTS]
        if bad:
            problems.append(f"trainer.checkpoint.{key}: unknown item(s) {bad}; known: {list(CHECKPOINT_CONTENTS)}")
    return problems


def check_sft_config(config: DictConfig, world_size: int | None = None) -> None:
    """Raise ConfigError listing every problem; fills `data.micro_batch_size_per_gpu` from the deprecated key."""
    world = world_size or sft_world_size(config)
    problems = (_batch_problems(config, world) + _data_problems(config) + _model_problems(config)
                + _optim_problems(config) + _trainer_problems(config))
    if problems:
        raise ConfigError(problems)
