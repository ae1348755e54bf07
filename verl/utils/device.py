"""The one place that decides the accelerator and the collective backend.

Everything else asks here, so a CPU-only machine and a GPU cluster run the same code paths.
"""

from __future__ import annotations

import functools
import os

import torch

# trainer.device, as the driver hands it to every process it starts (Ray workers inherit or are given it).
DEVICE_ENV = "VERL_DEVICE"
DEVICES = ("auto", "cpu", "cuda")


def set_device_preference(device: str) -> None:
    """Record trainer.device for this process and the workers it starts; "cpu" hides any GPU from verl."""
    if device not in DEVICES:
        raise ValueError(f"trainer.device={device!r}: use one of {DEVICES}")
    os.environ[DEVICE_ENV] = device


def device_preference() -> str:
    return os.environ.get(DEVICE_ENV, "auto")


@functools.lru_cache(maxsize=1)
def _cuda_present() -> bool:
    return torch.cuda.is_available()


def is_cuda_available() -> bool:
    """Whether verl computes on CUDA: a GPU is visible and trainer.device is not "cpu"."""
    return device_preference() != "cpu" and _cuda_present()


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


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):  # x86 / aarch64
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.lru_cache(maxsize=1)
def has_fast_bf16() -> bool:
    """Whether bf16 matmuls run natively on this device.

    On a CPU without AVX512-BF16 or AMX (aarch64: the bf16 feature) torch emulates them: measured on an AVX2 EPYC,
    0.8 GFLOP/s against 107 in fp32. There bf16 is a 100x slowdown, not a speedup, and fp32 is the right choice.
    """
    if is_cuda_available():
        return torch.cuda.is_bf16_supported()
    return bool(_cpu_flags() & {"avx512_bf16", "amx_bf16", "bf16"})


def preferred_low_precision() -> str:
    """"bf16" where it is native, else "fp32": what examples and benchmarks pass as param_dtype."""
    return hardware_compute_dtype()[0]


# The CPU features that make bf16 matmuls native, in the order they are named in the reason.
_NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")


def hardware_compute_dtype() -> tuple[str, str]:
    """("bf16" | "fp32", why) for a compute dtype the user left unset (mixed_precision.param_dtype,
    rollout.dtype). Upstream computes in bf16 unconditionally; here bf16 only where it is native, because an
    emulated bf16 matmul is ~100x slower than fp32 (has_fast_bf16). The reason is what the driver logs."""
    if is_cuda_available():
        if has_fast_bf16():
            return "bf16", "CUDA GPU with bf16 support"
        return "fp32", "CUDA GPU without bf16 support (pre-Ampere)"
    native = [flag for flag in _NATIVE_BF16_FLAGS if flag in _cpu_flags()]
    if has_fast_bf16() and native:
        return "bf16", f"CPU has {native[0]}: native bf16 matmuls"
    if has_fast_bf16():  # a test or a caller stood in for the flags
        return "bf16", "native bf16 matmuls on this device"
    return "fp32", "CPU has no AVX512-BF16/AMX: bf16 matmuls would be emulated, ~100x slower than fp32"


if __name__ == "__main__":  # `python -m verl.utils.device`: the dtype scripts should compute in
    print(preferred_low_precision())


def is_npu_available() -> bool:
    """Whether an Ascend NPU is usable (torch_npu installed and a device visible); upstream's switch for NPU code.

    This package runs on CUDA and CPU only, so every NPU branch in user code stays off unless torch_npu is present.
    """
    npu = getattr(torch, "npu", None)
    try:
        return bool(npu is not None and npu.is_available())
    except Exception:  # noqa: BLE001 - a broken torch_npu install means no NPU
        return False
