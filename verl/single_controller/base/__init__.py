"""Engine-independent single-controller pieces: Worker, WorkerGroup, ResourcePool, @register."""

from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch, Execute, register
from verl.single_controller.base.worker import Worker
from verl.single_controller.base.worker_group import ClassWithInitArgs, ResourcePool, WorkerGroup

__all__ = [
    "MAGIC_ATTR",
    "ClassWithInitArgs",
    "Dispatch",
    "Execute",
    "ResourcePool",
    "Worker",
    "WorkerGroup",
    "register",
]
