"""Worker groups on Ray: one Ray actor per rank, placed in a RayResourcePool's placement group.

torch.distributed's rendezvous address (rank 0's node IP and a port free there) is picked by a tiny task on rank 0's
node before any rank starts; every rank gets it in its environment (`runtime_env.env_vars`) before its code runs,
so all ranks start in parallel.
Calls wait rank by rank as results arrive, so a dead or failing rank is reported at once even while the others
are still blocked (e.g. in a collective waiting for the dead one).
"""

from __future__ import annotations

import os
import secrets
import time
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from verl.single_controller.base.deadlines import WorkerDeadlines, stage_of
from verl.single_controller.base.worker import TORCH_THREADS_ENV, Worker
from verl.single_controller.base.worker_group import WorkerGroup
from verl.single_controller.ray.class_with_args import RayClassWithInitArgs
from verl.single_controller.ray.colocate import create_colocated_worker_cls, create_colocated_worker_raw_cls
from verl.single_controller.ray.errors import (
    CallSite,
    WorkerDeadlineError,
    WorkerGroupError,
    deadline_error,
    translate_error,
)
from verl.single_controller.ray.resource_pool import RayResourcePool, ResourcePoolManager
from verl.utils.device import DEVICE_ENV

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

# Values this small are cheaper to send inline than through the object store.
_INLINE_TYPES = (type(None), bool, int, float, str, bytes)


class RayWorkerGroup(WorkerGroup):
    """N ranks of one worker class on Ray, with the class's @register-ed methods bound as group methods."""

    def __init__(
        self,
        resource_pool: RayResourcePool | None = None,
        ray_cls_with_init: RayClassWithInitArgs | None = None,
        bin_pack: bool = True,
        name_prefix: str | None = None,
        detached: bool = False,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        deadlines: WorkerDeadlines | None = None,
        worker_env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(resource_pool=resource_pool, name_prefix=name_prefix or secrets.token_hex(3),
                         deadlines=deadlines)
        reserved = sorted(set(worker_env or {}) & _GROUP_ENV)
        if reserved:
            raise ValueError(f"worker_env may not set {reserved}: the worker group sets them for each rank")
        # upstream's worker_env: extra environment variables every worker process starts with
        self.worker_env = {str(k): str(v) for k, v in (worker_env or {}).items()}
        if ray_cls_with_init is None:
            raise ValueError("RayWorkerGroup needs ray_cls_with_init=RayClassWithInitArgs(WorkerClass, ...)")
        self.ray_cls_with_init = ray_cls_with_init
        self._detached = detached
        self.resource_pool = resource_pool
        self._worker_info: list[dict[str, Any]] = []
        self._owns_pool_slot = False
        self.roles = list(ray_cls_with_init.colocated_roles or [ray_cls_with_init.user_class().__name__])
        if worker_handles is not None:
            if worker_names is None or len(worker_names) != len(worker_handles):
                raise ValueError("worker_handles need matching worker_names")
            self._workers, self._worker_names = list(worker_handles), list(worker_names)
        elif resource_pool is not None:
            resource_pool.reserve_group_slot(self.name_prefix)
            self._owns_pool_slot = True
            try:
                self._init_with_resource_pool(resource_pool, ray_cls_with_init)
            except BaseException:
                self.shutdown()  # no half-built group keeps processes and reserved resources
                raise
        elif worker_names is not None:
            self._workers = [ray.get_actor(n) for n in worker_names]
            self._worker_names = list(worker_names)
        else:
            raise ValueError("RayWorkerGroup needs a resource_pool (or worker_names of existing detached workers)")
        self._bind_worker_method(ray_cls_with_init.user_class())

    # ---- creation ----------------------------------------------------------------------------------------------
    def _init_with_resource_pool(self, pool: RayResourcePool, cls_with_init: RayClassWithInitArgs) -> None:
        world_size = pool.world_size
        local_ranks, local_sizes = pool.local_rank_list(), pool.local_world_size_list()
        is_worker = issubclass(cls_with_init.user_class(), Worker)
        base_env = {**self.worker_env, "WORLD_SIZE": str(world_size), "WG_PREFIX": self.name_prefix,
                    "WG_BACKEND": "ray"}
        # A joined cluster's workers do not inherit the driver's environment: trainer.device goes explicitly.
        for name in (TORCH_THREADS_ENV, DEVICE_ENV):
            if name in os.environ:
                base_env[name] = os.environ[name]
        if is_worker:
            # Chosen on rank 0's node before any rank starts, so all ranks can start at once.
            pg, bundle = pool.placement_of_rank(0)
            strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=bundle)
            addr, port = ray.get(_rendezvous_address.options(scheduling_strategy=strategy).remote())
            base_env.update(MASTER_ADDR=addr, MASTER_PORT=str(port))
        label = "_".join(self.roles)
        for rank in range(world_size):
            env = {
                **base_env,
                "RANK": str(rank),
                "LOCAL_RANK": str(local_ranks[rank]),
                "LOCAL_WORLD_SIZE": str(local_sizes[rank]),
                "RAY_LOCAL_WORLD_SIZE": str(local_sizes[rank]),  # upstream's name for the same number
            }
            name = f"{self.name_prefix}_{label}_rank{rank}"
            pg, bundle = pool.placement_of_rank(rank)
            handle = cls_with_init(pg, bundle, pool.actor_resources(), env, name=name, detached=self._detached)
            self._workers.append(handle)
            self._worker_names.append(name)
        # Waiting here surfaces a failing __init__ at creation, naming the rank.
        method = "get_worker_info" if is_worker else "__ray_ready__"
        infos = self._wait_ready(self._workers, list(range(world_size)), "__init__", method=method)
        if is_worker:
            self._worker_info = infos

    def _wait_ready(self, handles: list[Any], ranks: list[int], what: str, method: str) -> list[Any]:
        refs = [getattr(h, method).remote() for h in handles]
        return self.wait_for_results(refs, ranks, what)

    @classmethod
    def from_detached(
        cls,
        name_prefix: str | None = None,
        worker_names: list[str] | None = None,
        worker_handles: list[Any] | None = None,
        ray_cls_with_init: RayClassWithInitArgs | None = None,
        **kwargs: Any,
    ) -> RayWorkerGroup:
        return cls(
            resource_pool=None,
            ray_cls_with_init=ray_cls_with_init,
            name_prefix=name_prefix,
            worker_names=worker_names,
            worker_handles=worker_handles,
            **kwargs,
        )

    def spawn(self, prefix_set) -> dict[str, RayWorkerGroup]:
        """Per-role views of a colocated group: same processes, each role's methods under their plain names."""
        method_names = (self.ray_cls_with_init.role_method_names
                        or getattr(self.ray_cls_with_init.user_class(), "role_method_names", None))
        if method_names is None:
            raise ValueError("spawn() needs a group built from create_colocated_worker_cls(...) or from a subclass "
                             "of create_colocated_worker_raw_cls(...)")
        views = {}
        for role in prefix_set:
            if role not in method_names:
                raise KeyError(f"role '{role}' is not in this colocated group (roles: {sorted(method_names)})")
            view = object.__new__(type(self))
            WorkerGroup.__init__(view, resource_pool=None, name_prefix=self.name_prefix)
            view.ray_cls_with_init, view.resource_pool, view._detached = self.ray_cls_with_init, None, self._detached
            view._owns_pool_slot = False
            view._workers, view._worker_names = self._workers, self._worker_names
            view._worker_info, view.roles, view.deadlines = self._worker_info, [role], self.deadlines
            view._bind_worker_method(self.ray_cls_with_init.user_class(), method_names=method_names[role])
            views[role] = view
        return views

    def fuse(self, prefix_set) -> None:
        """Upstream's fused workers: the per-role views of ``spawn`` become attributes of this group
        (``wg.actor.update(...)``), beside the group's own methods."""
        for role, view in self.spawn(prefix_set).items():
            if hasattr(self, role):
                raise ValueError(f"cannot fuse role '{role}': {type(self).__name__} already has an attribute of "
                                 "that name")
            setattr(self, role, view)

    # ---- execution ---------------------------------------------------------------------------------------------
    def execute_all_async(self, method_name: str, *args: Any, **kwargs: Any) -> list[ray.ObjectRef]:
        n = self.world_size
        values = [*args, *kwargs.values()]
        per_rank = bool(values) and all(isinstance(v, list) and len(v) == n for v in values)
        if per_rank:
            args = tuple(_share(a) for a in args)
            kwargs = {k: _share(v) for k, v in kwargs.items()}
        refs = []
        for rank, worker in enumerate(self._workers):
            if per_rank:
                rank_args = tuple(a[rank] for a in args)
                rank_kwargs = {k: v[rank] for k, v in kwargs.items()}
            else:
                rank_args, rank_kwargs = args, kwargs
            refs.append(getattr(worker, method_name).remote(*rank_args, **rank_kwargs))
        return refs

    def execute_rank_zero_async(self, method_name: str, *args: Any, **kwargs: Any) -> ray.ObjectRef:
        return getattr(self._workers[0], method_name).remote(*args, **kwargs)

    def wait_for_results(self, handles: list[Any], ranks: list[int], method_name: str,
                         samples: int = 0) -> list[Any]:
        position = {ref: i for i, ref in enumerate(handles)}
        results: list[Any] = [None] * len(handles)
        pending = list(handles)
        plain = self._plain_method_name(method_name)
        timeout_s = self.deadlines.for_call(plain, samples) if self.deadlines is not None else None
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while pending:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, pending = ray.wait(pending, num_returns=1, timeout=remaining)
            if not ready:
                raise self._overrun([ranks[position[ref]] for ref in pending], plain, samples, timeout_s)
            for ref in ready:
                i = position[ref]
                try:
                    results[i] = ray.get(ref)
                except ray.exceptions.RayTaskError as err:
                    death = self._dead_peer(err, pending, position, ranks, plain)
                    raise (death or translate_error(err, self._call_site(ranks[i], plain))) from None
                except ray.exceptions.RayActorError as err:
                    raise translate_error(err, self._call_site(ranks[i], plain)) from None
        return results

    def _dead_peer(self, err: Exception, pending: list[Any], position: dict[Any, int], ranks: list[int],
                   method_name: str) -> Exception | None:
        """When a rank fails inside a collective (its peer's connection reset or closed), the usual cause is a peer
        that died, whose own death reaches Ray a moment later: wait for the other ranks a bounded while, and name
        the dead one if there is one (its error, not the survivor's symptom, is what the user must see)."""
        text = str(err)
        if not any(mark in text for mark in _COLLECTIVE_FAILURES):
            return None
        end = time.monotonic() + _PEER_DEATH_GRACE_S
        while pending and time.monotonic() < end:
            ready, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, end - time.monotonic()))
            for ref in ready:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as death:
                    return translate_error(death, self._call_site(ranks[position[ref]], method_name))
                except ray.exceptions.RayTaskError:
                    continue
        return None

    def _plain_method_name(self, method_name: str) -> str:
        """A colocated group's role view calls `<role>_<method>` remotely; deadlines and stages use `<method>`."""
        for role in self.roles:
            if method_name.startswith(f"{role}_"):
                return method_name[len(role) + 1:]
        return method_name

    def _overrun(self, pending: list[int], method_name: str, samples: int, timeout_s: float) -> WorkerDeadlineError:
        """Kill the group (a hung rank may hold the others in a collective) and name what was still running."""
        names = [self._worker_names[r] if r < len(self._worker_names) else "?" for r in pending]
        self.shutdown()
        return deadline_error(self._call_site(pending[0], method_name), stage_of(method_name), pending, names,
                              timeout_s, self.deadlines.explain(method_name, samples),
                              self.deadlines.which_key(method_name))

    def _call_site(self, rank: int, method_name: str) -> CallSite:
        return CallSite(
            group=self.name_prefix,
            roles=tuple(self.roles),
            method=method_name,
            rank=rank,
            world_size=self.world_size,
            worker_name=self._worker_names[rank] if rank < len(self._worker_names) else "?",
        )

    @property
    def worker_info(self) -> list[dict[str, Any]]:
        """Per rank: pid, node IP and Ray node id (Worker subclasses only)."""
        return self._worker_info

    def shutdown(self) -> None:
        """Kill this group's actors (all views of a colocated group share them)."""
        for worker in self._workers:
            try:
                ray.kill(worker, no_restart=True)
            except ValueError:  # already gone
                pass
        if self._owns_pool_slot:
            self.resource_pool.release_group_slot()
            self._owns_pool_slot = False


# what a rank's error says when a collective lost its peer (gloo, NCCL), and how long to wait for that peer's death
_COLLECTIVE_FAILURES = ("Connection reset by peer", "Connection closed by peer", "gloo", "NCCL", "ProcessGroup")
_PEER_DEATH_GRACE_S = 30.0

# Set per rank by the group; a user's worker_env cannot override them.
_GROUP_ENV = frozenset({"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RAY_LOCAL_WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT", "WG_PREFIX", "WG_BACKEND"})


@ray.remote(num_cpus=0)
def _rendezvous_address() -> tuple[str, int]:
    """torch.distributed's rendezvous point: this node's IP and a port free on it right now."""
    return Worker._get_node_ip(), Worker._get_free_port()


def _share(per_rank: list) -> list:
    """The same large object sent to every rank goes through the object store once, not once per rank."""
    first = per_rank[0]
    if (
        len(per_rank) > 1
        and not isinstance(first, (_INLINE_TYPES, ray.ObjectRef))
        and all(v is first for v in per_rank)
    ):
        ref = ray.put(first)
        return [ref] * len(per_rank)
    return per_rank
