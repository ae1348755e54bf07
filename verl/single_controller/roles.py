"""The roles a trainer assigns to worker groups and resource pools (upstream verl's `Role` names)."""

from __future__ import annotations

from enum import Enum


class Role(Enum):
    """A job a worker group does. Hybrid-engine roles (ActorRollout, ActorRolloutRef) share one process per rank."""

    Actor = 0
    Rollout = 1
    ActorRollout = 2
    Critic = 3
    RefPolicy = 4
    RewardModel = 5
    ActorRolloutRef = 6

    def __str__(self) -> str:
        return self.name
