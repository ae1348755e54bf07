"""Upstream's ``verl.experimental.reward_loop`` path; the reward loop lives in ``verl.workers.reward_loop``."""

from verl.workers.reward_loop import (
    RewardLoopManager,
    RewardLoopSession,
    RewardLoopSpec,
    RewardLoopWorker,
)

__all__ = ["RewardLoopManager", "RewardLoopSession", "RewardLoopSpec", "RewardLoopWorker"]
