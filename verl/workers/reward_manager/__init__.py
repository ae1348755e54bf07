"""Reward managers: rollout batch -> token-level scores. Pick one with `reward_model.reward_manager`."""

from verl.workers.reward_manager.abstract import AbstractRewardManager, RawRewardFn
from verl.workers.reward_manager.batch import BatchRewardManager
from verl.workers.reward_manager.dapo import DAPORewardManager
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.prime import PrimeRewardManager
from verl.workers.reward_manager.registry import REWARD_MANAGER_REGISTRY, get_reward_manager_cls, register

__all__ = [
    "AbstractRewardManager",
    "RawRewardFn",
    "BatchRewardManager",
    "DAPORewardManager",
    "NaiveRewardManager",
    "PrimeRewardManager",
    "REWARD_MANAGER_REGISTRY",
    "get_reward_manager_cls",
    "register",
]
