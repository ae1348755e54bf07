"""The interface every actor backend implements (data-parallel torch today; others can plug in)."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from verl.protocol import DataProto
from verl.workers.config import ActorConfig, RefConfig

__all__ = ["BasePPOActor"]


class BasePPOActor(ABC):
    def __init__(self, config: ActorConfig | RefConfig) -> None:
        # the typed section: the actor's, or the reference policy's for its log-prob pass
        self.config = config

    @abstractmethod
    def compute_log_prob(self, data: DataProto, calculate_entropy: bool = False
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (bs, R) of ``responses`` under the current policy, and entropies when asked."""

    @abstractmethod
    def update_policy(self, data: DataProto) -> dict:
        """PPO epochs over mini-batches; returns metric lists keyed by upstream names (actor/...)."""
