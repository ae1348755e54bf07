"""Upstream's ``verl.experimental.reward_loop.reward_manager`` path: the per-sample reward managers and their registry
(``register``, ``get_reward_manager_cls``). A batch manager's name (naive, dapo, prime, batch) runs in the loop one
sample at a time through ``BatchManagerAdapter``."""

from verl.workers.reward_loop.adapter import BatchManagerAdapter
from verl.workers.reward_loop.base import REWARD_LOOP_MANAGER_REGISTRY, RewardManagerBase, register
from verl.workers.reward_loop.base import get_reward_loop_manager_cls as get_reward_manager_cls
from verl.workers.reward_loop.limited import RateLimitedRewardManager

__all__ = ["BatchManagerAdapter", "REWARD_LOOP_MANAGER_REGISTRY", "RateLimitedRewardManager", "RewardManagerBase",
           "get_reward_manager_cls", "register"]
