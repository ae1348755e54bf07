"""The single controller on Ray: resource pools on placement groups, one actor per rank, colocated roles."""

from verl.single_controller.ray.base import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    ResourcePoolManager,
    WorkerDeadlineError,
    WorkerDeadlines,
    WorkerGroupError,
    create_colocated_worker_cls,
    create_colocated_worker_raw_cls,
)

__all__ = [
    "RayClassWithInitArgs",
    "RayResourcePool",
    "RayWorkerGroup",
    "ResourcePoolManager",
    "WorkerDeadlineError",
    "WorkerDeadlines",
    "WorkerGroupError",
    "create_colocated_worker_cls",
    "create_colocated_worker_raw_cls",
]
