"""Which low precision to compute in: bf16 only where the hardware has it natively."""

from __future__ import annotations

import pytest

from verl.utils import device


@pytest.fixture(autouse=True)
def _cpu(monkeypatch):
    monkeypatch.setattr(device, "is_cuda_available", lambda: False)
    device.has_fast_bf16.cache_clear()
    yield
    device.has_fast_bf16.cache_clear()


@pytest.mark.parametrize("flags, fast", [
    ({"avx", "avx2", "fma", "f16c"}, False),  # AVX2 EPYC: bf16 matmuls emulated (0.8 vs 107 GFLOP/s fp32)
    ({"avx2", "avx512f", "avx512_bf16"}, True),
    ({"avx2", "avx512f", "amx_bf16", "amx_tile"}, True),
    ({"fp", "asimd", "bf16"}, True),  # aarch64 lists its features under "Features"
    (set(), False),  # no /proc/cpuinfo: assume the safe fp32
])
def test_bf16_only_where_native(monkeypatch, flags, fast):
    monkeypatch.setattr(device, "_cpu_flags", lambda: flags)
    assert device.has_fast_bf16() is fast
    assert device.preferred_low_precision() == ("bf16" if fast else "fp32")


def test_cpu_flags_are_read_from_cpuinfo(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: real_open(info if path == "/proc/cpuinfo" else path,
                                                                          *a, **k))
    assert device._cpu_flags() == {"fpu", "avx2", "avx512_bf16"}


def test_fsdp_bf16_on_an_emulating_cpu_warns_naming_the_key(monkeypatch, caplog):
    from verl.trainer.config import FSDPEngineConfig, MixedPrecisionConfig
    from verl.workers import fsdp_utils

    monkeypatch.setattr(fsdp_utils, "has_fast_bf16", lambda: False)
    monkeypatch.setattr(fsdp_utils, "get_device_name", lambda: "cpu")
    with caplog.at_level("WARNING"):
        policy = fsdp_utils.mixed_precision_policy(FSDPEngineConfig(mixed_precision=MixedPrecisionConfig(param_dtype="bf16")))
    assert "fsdp_config.mixed_precision.param_dtype" in caplog.text and "fp32" in caplog.text
    assert str(policy.param_dtype) == "torch.bfloat16"  # the user's choice stands; it is only flagged


def test_fsdp_bf16_warning_can_be_silenced_for_repeat_lookups(monkeypatch, caplog):
    from verl.trainer.config import FSDPEngineConfig, MixedPrecisionConfig
    from verl.workers import fsdp_utils

    monkeypatch.setattr(fsdp_utils, "has_fast_bf16", lambda: False)
    monkeypatch.setattr(fsdp_utils, "get_device_name", lambda: "cpu")
    with caplog.at_level("WARNING"):
        policy = fsdp_utils.mixed_precision_policy(
            FSDPEngineConfig(mixed_precision=MixedPrecisionConfig(param_dtype="bf16")), warn=False)
    assert caplog.text == "" and str(policy.param_dtype) == "torch.bfloat16"


def test_device_preference_cpu_hides_a_gpu(monkeypatch):
    monkeypatch.undo()  # the real is_cuda_available, not the fixture's stand-in
    monkeypatch.setattr(device, "_cuda_present", lambda: True)
    monkeypatch.delenv(device.DEVICE_ENV, raising=False)
    assert device.device_preference() == "auto" and device.is_cuda_available()
    device.set_device_preference("cpu")
    assert not device.is_cuda_available() and device.get_nccl_backend() == "gloo"
    device.set_device_preference("auto")
    assert device.is_cuda_available()
    with pytest.raises(ValueError, match="trainer.device='gpu'"):
        device.set_device_preference("gpu")
