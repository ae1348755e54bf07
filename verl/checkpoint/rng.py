"""The random-number state of one process: torch (CPU and accelerator), numpy and Python's `random`.

Restoring it makes a resumed run draw the same samples (HF generate samples from torch's global generator) as an
uninterrupted one. The state holds only tensors, lists and ints, so it loads with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

from verl.utils.device import get_torch_device, is_cuda_available


def get_rng_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "cpu": torch.get_rng_state(),
        "numpy": [name, torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss), float(cached)],
        "random": random.getstate(),
    }
    if is_cuda_available():
        state["device"] = get_torch_device().get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    rnd = state["random"]
    random.setstate((rnd[0], tuple(rnd[1]), rnd[2]))
    if "device" in state and is_cuda_available():
        get_torch_device().set_rng_state(state["device"])
