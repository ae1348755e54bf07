"""Upstream's ``verl.experimental.reward_loop.reward_manager.base``."""

from verl.workers.reward_loop.base import RewardManagerBase

__all__ = ["RewardManagerBase"]
