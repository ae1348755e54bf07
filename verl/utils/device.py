"""The one place that decides the accelerator and the collective backend.

Everything else asks here, so a CPU-only machine and a GPU cluster run the same code paths.
"""

from __future__ import annotations

import functools

import torch


@functools.lru_cache(maxsize=1)
def is_cuda_available() -> bool:
    return torch.cuda.is_available()


def get_device_name() -> str:
    """"cuda" when a GPU is visible, else "cpu"."""
    return "cuda" if is_cuda_available() else "cpu"


def get_torch_device():
    """The torch device module (torch.cuda or torch.cpu) for device-agnostic calls like synchronize()."""
    return getattr(torch, get_device_name())


def get_device_id() -> int:
    return torch.cuda.current_device() if is_cuda_available() else 0


def get_nccl_backend() -> str:
    """The torch.distributed backend: nccl with GPUs, gloo on CPU."""
    return "nccl" if is_cuda_available() else "gloo"


def get_default_device() -> torch.device:
    if is_cuda_available():
        return torch.device("cuda", get_device_id())
    return torch.device("cpu")
