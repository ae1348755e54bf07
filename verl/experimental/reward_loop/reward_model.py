"""Upstream's ``verl.experimental.reward_loop.reward_model``: the generative reward model's engine manager (the
judge served by ``reward_model.rollout.*``; the code lives in ``verl.workers.genrm_engine``)."""

from verl.workers.genrm_engine import GenRMServer, RewardModelManager

__all__ = ["GenRMServer", "RewardModelManager"]
