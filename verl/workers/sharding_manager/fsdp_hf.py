"""FSDP -> HF rollout: the rollout generates with the training module itself, so there is nothing to copy;
entering the manager gathers the full weights once (instead of once per decode step) and leaving frees them."""

from __future__ import annotations

import torch

from verl.protocol import DataProto
from verl.workers.fsdp_utils import unsharded


class FSDPHFShardingManager:
    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self._ctx = None

    def __enter__(self) -> FSDPHFShardingManager:
        self._ctx = unsharded(self.module)
        self._ctx.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        ctx, self._ctx = self._ctx, None
        ctx.__exit__(*exc)

    # Data needs no resharding: rollout and training use the same data-parallel layout.
    def preprocess_data(self, data: DataProto) -> DataProto:
        return data

    def postprocess_data(self, data: DataProto) -> DataProto:
        return data
