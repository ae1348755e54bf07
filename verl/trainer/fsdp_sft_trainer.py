"""Supervised fine-tuning under FSDP2: `python -m verl.trainer.fsdp_sft_trainer key=value ...`.

One process per rank, SPMD: a plain `python -m` run is one rank (gloo on CPU); `torchrun --nproc_per_node=N -m
verl.trainer.fsdp_sft_trainer ...` gives N ranks, and `trainer.n_gpus_per_node=N` without torchrun starts the N
ranks as Ray workers (verl/trainer/sft/ray_launch.py). The trainer itself is verl/trainer/sft/trainer.py.
"""

from __future__ import annotations

import os
import sys

import hydra
import torch.distributed as dist
from omegaconf import DictConfig

from verl.trainer.config.errors import ConfigError
from verl.trainer.sft.argv import CONFIG_ERROR_EXIT, precheck_argv
from verl.trainer.sft.config import check_sft_config, sft_world_size
from verl.trainer.sft.trainer import FREE_FORM_SECTIONS, FSDPSFTTrainer, create_trainer, run_sft

__all__ = ["FSDPSFTTrainer", "create_trainer", "run_sft", "main"]


def check(config: DictConfig) -> None:
    try:
        check_sft_config(config)
    except ConfigError as err:
        print(f"Invalid config:\n{err}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)


@hydra.main(config_path="config", config_name="sft_trainer", version_base=None)
def main(config: DictConfig) -> None:
    check(config)
    if "RANK" not in os.environ and sft_world_size(config) > 1:
        from verl.trainer.sft.ray_launch import run_sft_on_ray

        run_sft_on_ray(config)
    else:
        run_sft(config)
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    precheck_argv("sft_trainer", FREE_FORM_SECTIONS)
    main()
