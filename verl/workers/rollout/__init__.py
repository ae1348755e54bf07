from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.hf_rollout import HFRollout

__all__ = ["BaseRollout", "HFRollout"]
