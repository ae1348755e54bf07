"""The interface every critic backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from verl.protocol import DataProto
from verl.workers.config import CriticConfig

__all__ = ["BasePPOCritic"]


class BasePPOCritic(ABC):
    def __init__(self, config: CriticConfig) -> None:
        self.config = config

    @abstractmethod
    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values (bs, R): the critic's estimate for the state before each response token."""

    @abstractmethod
    def update_critic(self, data: DataProto) -> dict:
        """Value-loss epochs over mini-batches; returns metric lists keyed by upstream names (critic/...)."""
