"""Worker classes for the fused-worker test (upstream's create_colocated_worker_raw_cls); importable by Ray workers."""

from __future__ import annotations

import os

from verl.single_controller.base import Dispatch, Worker, register
from verl.single_controller.ray import RayClassWithInitArgs, create_colocated_worker_raw_cls


class AddRole(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add(self, x):
        return x + self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self):
        return os.getpid()


class SubRole(Worker):
    def __init__(self, val) -> None:
        super().__init__()
        self.val = val

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def sub(self, x):
        return x - self.val

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def pid(self):
        return os.getpid()


CLASS_DICT = {"actor": RayClassWithInitArgs(cls=AddRole), "critic": RayClassWithInitArgs(cls=SubRole, val=10)}


class HybridWorker(create_colocated_worker_raw_cls(CLASS_DICT)):
    """Both roles in one call: critic.sub(actor.add(x)) without a round trip to the driver."""

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add_then_sub(self, x):
        return self.critic.sub(self.actor.add(x))
