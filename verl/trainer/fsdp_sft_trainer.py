"""Supervised fine-tuning under FSDP2: `python -m verl.trainer.fsdp_sft_trainer key=value ...`.

One process per rank, SPMD: a plain `python -m` run is one rank (gloo on CPU); `torchrun --nproc_per_node=N -m
verl.trainer.fsdp_sft_trainer ...` gives N ranks, and `trainer.n_gpus_per_node=N` without torchrun starts the N
ranks as Ray workers (verl/trainer/sft/ray_launch.py). The trainer itself is verl/trainer/sft/trainer.py.
The composed config is checked and typed (SFTTrainerConfig) before anything heavy starts; a bad one exits 2.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import hydra
from omegaconf import DictConfig

from verl.trainer.config.sft import SFTTrainerConfig
from verl.trainer.sft.argv import exit_on_config_error, precheck_argv
from verl.trainer.sft.config import sft_world_size, validate_sft_config
from verl.utils.config_errors import ConfigError

if TYPE_CHECKING:
    from verl.trainer.sft.trainer import FSDPSFTTrainer, create_trainer, run_sft

__all__ = ["FSDPSFTTrainer", "create_trainer", "run_sft", "main"]


def __getattr__(name: str):
    # The trainer (torch, transformers) loads only after the config has passed, so a bad key exits in a second.
    if name in ("FSDPSFTTrainer", "create_trainer", "run_sft"):
        from verl.trainer.sft import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@hydra.main(config_path="config", config_name="sft_trainer", version_base=None)
def main(config: DictConfig) -> None:
    try:
        typed = validate_sft_config(config)
    except ConfigError as err:
        exit_on_config_error(err)
    if "RANK" not in os.environ and sft_world_size(typed) > 1:
        from verl.trainer.sft.ray_launch import run_sft_on_ray

        run_sft_on_ray(typed)
    else:
        import torch.distributed as dist

        from verl.trainer.sft.trainer import run_sft

        run_sft(typed)
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    precheck_argv(SFTTrainerConfig, "sft_trainer")
    main()
