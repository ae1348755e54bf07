"""Upstream's ``verl.experimental.reward_loop.reward_manager.limited``: the rate limiter and the rate-limited manager."""

from verl.workers.reward_loop.limited import RateLimitedRewardManager
from verl.workers.reward_loop.rate_limit import AsyncTokenBucket

__all__ = ["AsyncTokenBucket", "RateLimitedRewardManager"]
