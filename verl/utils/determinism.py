"""Seeding a worker process and torch's deterministic mode: what `fsdp_config.seed` and
`fsdp_config.full_determinism` do (upstream's engine keys; upstream calls the second enable_full_determinism)."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["enable_full_determinism", "seed_everything"]


def seed_everything(seed: int) -> None:
    """Seed Python's random, numpy and torch (every CUDA device too, when there is one) with ``seed``."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds the CUDA generators as well when CUDA is initialised


def enable_full_determinism(seed: int) -> None:
    """``seed_everything(seed)`` and torch's deterministic algorithms for this process, as upstream: ops with a
    deterministic implementation use it, the others warn (``warn_only``); cuDNN deterministic without benchmark;
    CUBLAS_WORKSPACE_CONFIG, NCCL_DETERMINISTIC and FLASH_ATTENTION_DETERMINISTIC set for the kernels that read
    them. Slower: for debugging and exact reproduction."""
    os.environ["PYTHONHASHSEED"] = str(seed)  # for subprocesses started from here on
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":16:8"
    os.environ["NCCL_DETERMINISTIC"] = "1"
    os.environ["FLASH_ATTENTION_DETERMINISTIC"] = "1"
    seed_everything(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
