"""Turning a composed sft_trainer config into the typed SFTTrainerConfig, before any process group, model or data
is touched. Every problem is reported at once, each with its full dotted key (see verl/trainer/config/sft.py)."""

from __future__ import annotations

import os

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config.sft import SFTTrainerConfig, sft_file_problems, sft_problems, with_micro_batch_per_gpu
from verl.utils.config_errors import ConfigError
from verl.utils.config_schema import build_config


def sft_world_size(config: SFTTrainerConfig) -> int:
    """Ranks of the run: torchrun's WORLD_SIZE when launched by it, else nnodes x n_gpus_per_node."""
    if "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    return config.trainer.nnodes * config.trainer.n_gpus_per_node


def validate_sft_config(config: DictConfig | dict, world_size: int | None = None,
                        check_files: bool = True) -> SFTTrainerConfig:
    """The typed config, or ConfigError listing every problem. The deprecated global data.micro_batch_size is
    turned into data.micro_batch_size_per_gpu for `world_size` ranks (default: sft_world_size)."""
    node = config if isinstance(config, DictConfig) else OmegaConf.create(config)
    result = build_config(SFTTrainerConfig, node)
    if result.problems:
        raise ConfigError(result.problems)
    world = world_size or sft_world_size(result.config)
    typed = with_micro_batch_per_gpu(result.config, world)
    problems = sft_problems(typed, world) + (sft_file_problems(typed) if check_files else [])
    if problems:
        raise ConfigError(problems)
    return typed
