from verl.workers.actor.base import BasePPOActor
from verl.workers.actor.dp_actor import DataParallelPPOActor, NonFiniteLossError

__all__ = ["BasePPOActor", "DataParallelPPOActor", "NonFiniteLossError"]
