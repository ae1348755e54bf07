"""Model FLOPs of a training step, and a matmul peak measured on this machine to divide them by (MFU).

FLOPs counted (useful work on real tokens only; padding, recomputation and optimizer steps are not work):

    training = 6 * N * sum(L_i)                   every non-embedding weight: one multiply-add forward, two backward
             + 6 * V * H * K                      the LM head (vocab V x hidden H) on the K positions that need logits
             + 6 * layers * d_attn * sum(L_i^2)   causal attention: QK^T and AV over the lower triangle, x3 for backward
    forward  = training / 3

N counts every parameter except the input embedding and the output embedding (LM head) — a lookup costs no FLOPs,
and the LM head is charged per logit position instead, since the actor computes logits only where a response token
is predicted. d_attn = heads x head_dim. Upstream verl's flops_counter charges attention as a full L x L square
(12 instead of 6) and the LM head on every token; this counter charges what a causal kernel and the remove-padding
path actually need, so MFU here is a lower bound of theirs.

The peak is what this device reaches on large matmuls in the compute dtype (``measure_matmul_peak``): on a CPU
that is the attainable figure for these threads, on a GPU the sustained rate of 8192^2 matmuls after the clocks
ramp up, not a datasheet number. MFU = achieved FLOP/s / that peak.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from verl.utils.flops_formulas import FAMILIES, estimate_training_flops, layer_weights

__all__ = ["FlopsCounter", "non_embedding_params", "measure_matmul_peak", "default_probe_size", "mfu",
           "get_device_flops"]

# Datasheet dense bf16 peaks (FLOP/s), upstream's table: what estimate_flops' second value reports. Keys are matched
# as substrings of the device name in reverse alphabetical order (L40S before L40); MFU in this repo divides by a
# measured peak instead (measure_matmul_peak).
_DEVICE_FLOPS = {
    "CPU": 448e9, "GB200": 2.5e15, "B200": 2.25e15, "MI300X": 1336e12, "H100": 989e12, "H800": 989e12,
    "H200": 989e12, "A100": 312e12, "A800": 312e12, "L40S": 362.05e12, "L40": 181.05e12, "A40": 149.7e12,
    "L20": 119.5e12, "H20": 148e12, "910B": 354e12, "Ascend910": 354e12, "RTX 3070 Ti": 21.75e12,
}
_UNITS = ("B", "K", "M", "G", "T", "P")  # B: FLOP/s as is; each next unit a factor of 1000


def get_device_flops(unit: str = "T", device_name: str | None = None) -> float:
    """The datasheet FLOP/s of this device (or of ``device_name``) in ``unit`` (B: as is, K, M, G, T, P);
    inf for a device not in the table, as upstream."""
    if unit not in _UNITS:
        raise ValueError(f"unit must be one of {', '.join(_UNITS)}, got {unit!r}")
    if device_name is None:
        device_name = torch.cuda.get_device_name() if torch.cuda.is_available() else "CPU"
    flops = next((v for k, v in sorted(_DEVICE_FLOPS.items(), reverse=True) if k in device_name), float("inf"))
    return flops / 1000 ** _UNITS.index(unit)

_PEAK_CACHE: dict[tuple, float] = {}


def _unique_params(module: torch.nn.Module | None) -> dict[int, torch.nn.Parameter]:
    return {} if module is None else {id(p): p for p in module.parameters()}


def non_embedding_params(model: torch.nn.Module) -> tuple[int, int]:
    """(N, LM-head parameters): N excludes the input and output embeddings; a tied head is counted once.

    FSDP2 parameters are DTensors whose ``numel()`` is the full (unsharded) size, so every rank gets the same N.
    """
    embeddings = _unique_params(model.get_input_embeddings()) if hasattr(model, "get_input_embeddings") else {}
    get_output = getattr(model, "get_output_embeddings", None)
    head = _unique_params(get_output()) if callable(get_output) else {}
    skip = embeddings.keys() | head.keys()
    total = sum(p.numel() for p in _unique_params(model).values() if id(p) not in skip)
    head_params = sum(p.numel() for p in head.values() if p.dim() == 2)  # the weight matrix, not a bias
    return int(total), int(head_params)


class FlopsCounter:
    """FLOPs of forwards/backwards of one HF decoder model.

    ``FlopsCounter(config)`` (upstream's signature: an HF config, or its ``text_config``'s owner) or
    ``FlopsCounter(model)`` (the weights are counted from the module). ``estimate_flops(batch_seqlens, delta_time)``
    gives upstream's (achieved TFLOP/s, the device's datasheet TFLOP/s) with upstream's accounting
    (verl.utils.flops_formulas); ``training_flops`` / ``forward_flops`` count this module's way (docstring above).
    """

    def __init__(self, config: Any) -> None:
        model = config if isinstance(config, torch.nn.Module) else None
        if model is not None:
            config = getattr(model, "config", None)
            if config is None:
                raise TypeError(f"FlopsCounter needs an HF config or a model with one, got {type(model).__name__}")
        text = config.get_text_config() if hasattr(config, "get_text_config") else None
        self.config = text or getattr(config, "text_config", None) or config
        if model is None and getattr(self.config, "model_type", None) not in FAMILIES:
            warnings.warn(f"FlopsCounter: no FLOPs formula for model_type {getattr(self.config, 'model_type', None)!r} "
                          f"(known: {', '.join(sorted(FAMILIES))}); estimate_flops will report 0", stacklevel=2)
        heads = int(self.config.num_attention_heads)
        head_dim = int(getattr(self.config, "head_dim", None) or self.config.hidden_size // heads)
        self.num_layers = int(self.config.num_hidden_layers)
        self.attn_dim = heads * head_dim
        if model is not None:
            self.params, self.head_params = non_embedding_params(model)
        else:
            weights = layer_weights(self.config)
            self.params = None if weights is None else sum(weights)
            self.head_params = int(self.config.vocab_size) * int(self.config.hidden_size)

    def estimate_flops(self, batch_seqlens: Sequence[int], delta_time: float) -> tuple[float, float]:
        """(TFLOP/s achieved by one training pass over sequences of ``batch_seqlens`` real tokens in ``delta_time``
        seconds, the device's datasheet TFLOP/s), counted as upstream counts them; 0 achieved for an unknown
        model_type, as upstream."""
        flops = estimate_training_flops(self.config, batch_seqlens)
        achieved = 0.0 if flops is None else flops / float(delta_time) / 1e12
        return achieved, get_device_flops()

    def training_flops(self, seqlens: Sequence[int], logit_positions: int) -> float:
        """FLOPs of forward + backward over sequences of ``seqlens`` real tokens, logits at ``logit_positions``."""
        if self.params is None:
            raise ValueError(f"no FLOPs formula for model_type {self.config.model_type!r}: build the counter from the "
                             "model (FlopsCounter(model)) to count its weights")
        lengths = [int(n) for n in seqlens]
        tokens = sum(lengths)
        squares = sum(n * n for n in lengths)
        return float(6 * self.params * tokens + 6 * self.head_params * int(logit_positions)
                     + 6 * self.num_layers * self.attn_dim * squares)

    def forward_flops(self, seqlens: Sequence[int], logit_positions: int) -> float:
        return self.training_flops(seqlens, logit_positions) / 3.0


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_EMULATED_FLOPS = 5e9  # a 2-core AVX2 box does ~100 GFLOP/s in fp32; 5 only where the dtype is emulated

# On an accelerator one 2048^3 matmul is ~20 us of work, shorter than a launch plus a host sync: timed one by one it
# read 265 TFLOP/s on an H100 that does ~800. So the probe there is a large matmul, timed in back-to-back runs
# between device events (no host sync inside a run), after a warm-up long enough for the clocks to ramp up.
CPU_PROBE_SIZE = 2048
ACCELERATOR_PROBE_SIZE = 8192
ACCELERATOR_RUN = 20  # matmuls per timed run
ACCELERATOR_WARMUP_S = 0.3


def default_probe_size(device: torch.device | str) -> int:
    return CPU_PROBE_SIZE if torch.device(device).type == "cpu" else ACCELERATOR_PROBE_SIZE


def _cpu_emulated_rate(size: int, dtype: torch.dtype) -> float | None:
    """The rate of a quarter-size matmul when it shows the dtype is emulated (bf16 without AVX512-BF16/AMX: ~1
    GFLOP/s, where full-size probes would take minutes and the small figure is as good as any), else None."""
    probe = max(64, size // 4)
    a = torch.randn(probe, probe, dtype=dtype)
    start = time.perf_counter()
    torch.matmul(a, a)
    rate = 2.0 * probe**3 / (time.perf_counter() - start)
    return rate if rate < _EMULATED_FLOPS else None


def _cpu_rate(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, repeats: int) -> float:
    best = float("inf")
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        torch.matmul(a, b, out=out)
        best = min(best, time.perf_counter() - start)
    return 2.0 * a.size(0) ** 3 / best


def _accelerator_rate(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, repeats: int) -> float:
    """The best of ``repeats`` runs of ACCELERATOR_RUN matmuls timed by device events, after a timed warm-up."""
    device = a.device
    start = time.perf_counter()
    while time.perf_counter() - start < ACCELERATOR_WARMUP_S:  # clocks ramp up under sustained load
        for _ in range(ACCELERATOR_RUN):
            torch.matmul(a, b, out=out)
        _synchronize(device)
    best = float("inf")
    for _ in range(max(1, repeats)):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(ACCELERATOR_RUN):
            torch.matmul(a, b, out=out)
        end.record()
        end.synchronize()
        best = min(best, begin.elapsed_time(end) / 1e3 / ACCELERATOR_RUN)
    return 2.0 * a.size(0) ** 3 / best


def measure_matmul_peak(device: torch.device | str | None = None, dtype: torch.dtype = torch.float32,
                        size: int | None = None, repeats: int = 5, fresh: bool = False) -> float:
    """FLOP/s of (size x size) @ (size x size) matmuls in ``dtype`` on ``device``: the best of ``repeats``.

    ``size`` None: 2048 on a CPU, 8192 on an accelerator (timed in runs between device events after a warm-up; see
    ACCELERATOR_PROBE_SIZE). Cached per (device, dtype, size, torch threads): measured once per process, e.g. at
    worker start-up. ``fresh`` measures again (a shared machine's speed drifts over minutes; a benchmark measures
    next to what it divides) and caches the new figure.
    """
    device = torch.device(device) if device is not None else torch.device("cpu")
    size = int(size or default_probe_size(device))
    key = (str(device), dtype, size, torch.get_num_threads())
    if fresh:
        _PEAK_CACHE.pop(key, None)
    if key not in _PEAK_CACHE and device.type == "cpu":
        emulated = _cpu_emulated_rate(size, dtype)
        if emulated is not None:
            _PEAK_CACHE[key] = emulated
    if key not in _PEAK_CACHE:
        gen = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
        b = torch.randn(size, size, generator=gen).to(device=device, dtype=dtype)
        out = torch.matmul(a, b)
        _synchronize(device)
        timed = _accelerator_rate if device.type == "cuda" else _cpu_rate
        _PEAK_CACHE[key] = timed(a, b, out, repeats)
        del a, b, out
    return _PEAK_CACHE[key]


def mfu(flops: float, seconds: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the peak (0 when nothing was timed)."""
    if seconds <= 0 or peak_flops_per_s <= 0:
        return 0.0
    return flops / seconds / peak_flops_per_s
