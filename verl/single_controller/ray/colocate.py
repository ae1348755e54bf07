"""Several roles in one process per rank (the hybrid engine): actor, rollout and ref share memory and devices.

`create_colocated_worker_cls({"actor_rollout": RayClassWithInitArgs(...), "ref": ...})` returns the class of a
`WorkerDict` actor that builds every role's worker in its own process and exposes each role's @register-ed method
`m` as `{role}_{m}`. `RayWorkerGroup.spawn(roles)` then gives per-role views with the plain names.
`create_colocated_worker_raw_cls` is the same class before it is wrapped, for upstream's fused workers.
"""

from __future__ import annotations

import functools
from typing import Any

from verl.single_controller.base.decorator import MAGIC_ATTR, registered_methods
from verl.single_controller.base.worker import Worker
from verl.single_controller.ray.class_with_args import RayClassWithInitArgs, user_class


def _forwarder(role: str, method_name: str, original: Any):
    @functools.wraps(original)
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.worker_dict[role], method_name)(*args, **kwargs)

    # The role's method already resolves futures itself; the forwarder only needs the dispatch settings.
    setattr(forward, MAGIC_ATTR, getattr(original, MAGIC_ATTR))
    forward.__name__ = f"{role}_{method_name}"
    return forward


def create_colocated_worker_raw_cls(class_dict: dict[str, Any]) -> type:
    """The plain (not ``ray.remote``) class behind a colocated group: its ``__init__`` builds every role of
    `class_dict` (role name -> RayClassWithInitArgs) in this process, reachable as ``self.worker_dict[role]`` and as
    the attribute ``self.<role>``; each role's @register-ed method ``m`` is forwarded as ``<role>_<m>``.

    Upstream's fused workers subclass it (``@ray.remote class Hybrid(create_colocated_worker_raw_cls(d))``) to add
    methods that call several roles in one remote call; ``RayWorkerGroup.fuse(roles)`` then gives the group one
    attribute per role with that role's methods under their plain names."""
    if not class_dict:
        raise ValueError("create_colocated_worker_raw_cls needs at least one role")
    roles = {role: (user_class(c.cls), c.args, c.kwargs) for role, c in class_dict.items()}

    class WorkerDict(Worker):
        def __init__(self) -> None:
            # not super(): a subclass made in a user module may reach Ray workers with a by-value copy of this class
            Worker.__init__(self)
            # Built in class_dict order; each role reads the same rank environment this process was given.
            self.worker_dict = {role: cls(*args, **kwargs) for role, (cls, args, kwargs) in roles.items()}
            for role, instance in self.worker_dict.items():
                setattr(self, role, instance)

    method_names: dict[str, dict[str, str]] = {}
    for role, (cls, _, _) in roles.items():
        method_names[role] = {}
        for name in registered_methods(cls):
            prefixed = f"{role}_{name}"
            setattr(WorkerDict, prefixed, _forwarder(role, name, getattr(cls, name)))
            method_names[role][prefixed] = name

    WorkerDict.__name__ = WorkerDict.__qualname__ = "WorkerDict_" + "_".join(roles)
    # read by RayWorkerGroup.spawn / fuse when the group was built from a subclass of this class
    WorkerDict.colocated_roles = list(roles)
    WorkerDict.role_method_names = method_names
    return WorkerDict


def create_colocated_worker_cls(class_dict: dict[str, Any]):
    """One actor class running every role of `class_dict` (role name -> RayClassWithInitArgs) in one process."""
    raw = create_colocated_worker_raw_cls(class_dict)
    colocated = RayClassWithInitArgs(cls=raw)
    colocated.colocated_roles = list(raw.colocated_roles)
    colocated.role_method_names = raw.role_method_names
    # Actor options the roles asked for (e.g. runtime_env) apply to the shared process.
    for c in class_dict.values():
        colocated.update_options(getattr(c, "_options", {}))
    return colocated
