"""The reward loop (``reward_model.use_reward_loop``): every sample scored the moment its rollout finishes, by
``reward_model.num_workers`` x ``max_concurrency_per_worker`` concurrent scorers, while the rest of the batch is still generating. See
docs/reward_loop.md; upstream's import path is ``verl.experimental.reward_loop``."""

from verl.workers.reward_loop.adapter import BatchManagerAdapter
from verl.workers.reward_loop.base import (
    REWARD_LOOP_MANAGER_REGISTRY,
    RewardManagerBase,
    get_reward_loop_manager_cls,
    register,
)
from verl.workers.reward_loop.judge import OpenAIJudge, judge_compute_score, parse_verdict
from verl.workers.reward_loop.limited import RateLimitedRewardManager
from verl.workers.reward_loop.manager import RewardLoopManager, RewardLoopWorker, attach_loop_scores, scores_to_batch
from verl.workers.reward_loop.rate_limit import AsyncTokenBucket, RateLimits
from verl.workers.reward_loop.session import META_KEY, RewardLoopError, RewardLoopSession, RewardLoopSpec

__all__ = ["OpenAIJudge", "RateLimitedRewardManager", "judge_compute_score", "parse_verdict", "AsyncTokenBucket", "BatchManagerAdapter", "META_KEY", "REWARD_LOOP_MANAGER_REGISTRY", "RateLimits",
           "RewardLoopError", "RewardLoopManager", "RewardLoopSession", "RewardLoopSpec", "RewardLoopWorker",
           "RewardManagerBase", "attach_loop_scores", "get_reward_loop_manager_cls", "register", "scores_to_batch"]
