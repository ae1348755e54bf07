"""Resource pools on Ray placement groups, and the manager that maps trainer roles to pools.

A pool with `process_on_nodes=[n0, n1, ...]` reserves one placement-group bundle per node, holding that node's n_i
processes ({"CPU": n_i * cpus_per_process} plus n_i GPUs when GPUs are used). One node: STRICT_PACK. Several:
STRICT_SPREAD, so each entry really is a different node. Every rank of a group is scheduled into its node's bundle;
`max_colocate_count` groups can share the same bundles (each actor asks for 1/max_colocate_count of its share).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group

from verl.single_controller.base.worker_group import ResourcePool
from verl.single_controller.roles import Role


class RayResourcePool(ResourcePool):
    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool | None = None,
        name_prefix: str | None = None,
        max_colocate_count: int = 10,
        detached: bool = False,
        accelerator_type: str | None = None,
        cpus_per_process: float = 1.0,
        placement_timeout_s: float = 120.0,
    ) -> None:
        """
        Args:
            use_gpu: one GPU per process; None means "if the Ray cluster has GPUs".
            cpus_per_process: logical Ray CPUs reserved per process (fractions allowed).
            placement_timeout_s: how long to wait for the cluster to fit the pool before failing.
        """
        super().__init__(process_on_nodes, max_colocate_count)
        if cpus_per_process <= 0:
            raise ValueError(f"cpus_per_process must be > 0, got {cpus_per_process}")
        self._use_gpu = use_gpu
        self.name_prefix = name_prefix or ""
        self.detached = detached
        self.accelerator_type = accelerator_type
        self.cpus_per_process = cpus_per_process
        self.placement_timeout_s = placement_timeout_s
        self.pgs: list[PlacementGroup] | None = None
        # Groups currently placed on this pool; one more than max_colocate_count would wait forever for resources.
        self.groups_placed = 0

    @property
    def use_gpu(self) -> bool:
        if self._use_gpu is None:
            self._use_gpu = ray.cluster_resources().get("GPU", 0) > 0
        return self._use_gpu

    def bundles(self) -> list[dict[str, float]]:
        out = []
        for n in self.store:
            bundle: dict[str, float] = {"CPU": n * self.cpus_per_process}
            if self.use_gpu:
                bundle["GPU"] = n
            if self.accelerator_type:
                bundle[f"accelerator_type:{self.accelerator_type}"] = 0.001 * n
            out.append(bundle)
        return out

    def actor_resources(self) -> dict[str, float]:
        """What one rank's actor asks for inside its bundle."""
        res = {"num_cpus": self.cpus_per_process / self.max_colocate_count}
        if self.use_gpu:
            res["num_gpus"] = 1 / self.max_colocate_count
        return res

    def get_placement_groups(
        self, strategy: str | None = None, name: str | None = None, device_name: str | None = None
    ) -> list[PlacementGroup]:
        """The pool's placement group(s), created on first use and reused by every group built on this pool."""
        if self.pgs is not None:
            return self.pgs
        if not self.store:
            raise ValueError("RayResourcePool has no nodes: pass process_on_nodes=[processes per node, ...]")
        bundles = self.bundles()
        self._check_fits(bundles)
        strategy = strategy or ("STRICT_PACK" if len(bundles) == 1 else "STRICT_SPREAD")
        if strategy in ("STRICT_SPREAD", "STRICT_PACK"):
            self._check_nodes_fit(bundles)
        pg = placement_group(
            bundles,
            strategy=strategy,
            name=name or (f"{self.name_prefix}_pg" if self.name_prefix else ""),
            lifetime="detached" if self.detached else None,
        )
        try:
            ray.get(pg.ready(), timeout=self.placement_timeout_s)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(pg)
            raise RuntimeError(
                f"resource pool '{self.name_prefix}' (process_on_nodes={self.store}) could not be placed within "
                f"{self.placement_timeout_s:.0f} s: it needs bundles {bundles} with strategy {strategy} (one bundle "
                f"per node), the cluster has {len(ray.nodes())} node(s) with free {ray.available_resources()}. "
                "Lower process_on_nodes / cpus_per_process, or add nodes."
            ) from None
        self.pgs = [pg]
        return self.pgs

    def _check_fits(self, bundles: list[dict[str, float]]) -> None:
        total = ray.cluster_resources()
        for resource in ("CPU", "GPU"):
            need = sum(b.get(resource, 0) for b in bundles)
            if need > total.get(resource, 0):
                raise RuntimeError(
                    f"resource pool '{self.name_prefix}' (process_on_nodes={self.store}) needs {need:g} {resource} "
                    f"but the whole Ray cluster has {total.get(resource, 0):g}. "
                    + (
                        "Start Ray with more logical CPUs (ray_kwargs.ray_init.num_cpus) or lower cpus_per_process."
                        if resource == "CPU"
                        else "Use fewer processes per node, or use_gpu=False."
                    )
                )

    def _check_nodes_fit(self, bundles: list[dict[str, float]]) -> None:
        """Refuse at once a pool that no set of live nodes could hold: Ray would otherwise keep the placement group
        pending (until placement_timeout_s) waiting for nodes that may never join."""
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if len(bundles) > len(nodes):
            raise RuntimeError(
                f"resource pool '{self.name_prefix}' (process_on_nodes={self.store}) needs {len(bundles)} distinct "
                f"Ray nodes (one bundle per node: trainer.nnodes={len(bundles)}) but the cluster has {len(nodes)} "
                f"alive node(s) {[n['NodeID'][:12] for n in nodes]}. Lower trainer.nnodes, or join more nodes "
                "(`ray start --address=<head>` on each) before starting the run."
            )
        # Largest bundle against the largest node, and so on, per resource: a necessary condition for STRICT_SPREAD
        # (and exact for one bundle), cheap enough to run before every placement.
        for resource in ("CPU", "GPU"):
            need = sorted((b.get(resource, 0) for b in bundles), reverse=True)
            have = sorted((n.get("Resources", {}).get(resource, 0) for n in nodes), reverse=True)
            for i, amount in enumerate(need):
                if amount > have[i]:
                    raise RuntimeError(
                        f"resource pool '{self.name_prefix}' (process_on_nodes={self.store}) needs {amount:g} "
                        f"{resource} on each of {i + 1} node(s), but the nodes hold {have} {resource}: node "
                        f"{i + 1} is short by {amount - have[i]:g} {resource}. Lower trainer.n_gpus_per_node "
                        f"(processes per node) or cpus_per_process, or start the nodes with more "
                        f"{'--num-cpus' if resource == 'CPU' else '--num-gpus'}."
                    )

    def reserve_group_slot(self, group_name: str) -> None:
        if self.groups_placed >= self.max_colocate_count:
            raise RuntimeError(
                f"resource pool '{self.name_prefix}' already holds {self.groups_placed} worker group(s), its "
                f"max_colocate_count; worker group '{group_name}' would wait forever for resources. Shut a group "
                "down first, raise max_colocate_count, or colocate the roles in one process with "
                "create_colocated_worker_cls."
            )
        self.groups_placed += 1

    def release_group_slot(self) -> None:
        self.groups_placed = max(0, self.groups_placed - 1)

    def placement_of_rank(self, rank: int) -> tuple[PlacementGroup, int]:
        """(placement group, bundle index) that rank `rank` is scheduled into."""
        pg = self.get_placement_groups()[0]
        return pg, self.node_of_rank_list()[rank]

    def remove(self) -> None:
        """Release the reservation (after the groups on it were shut down)."""
        for pg in self.pgs or []:
            remove_placement_group(pg)
        self.pgs = None


@dataclass
class ResourcePoolManager:
    """Which pool each role runs in: `resource_pool_spec={"global_pool": [2]}, mapping={Role.ActorRollout:
    "global_pool", Role.Critic: "global_pool"}`. Roles in the same pool are colocated by the trainer."""

    resource_pool_spec: dict[str, list[int]]
    mapping: dict[Role, str]
    resource_pool_dict: dict[str, RayResourcePool] = field(default_factory=dict)
    pool_kwargs: dict[str, Any] = field(default_factory=dict)

    def create_resource_pool(self) -> None:
        for role, pool_name in self.mapping.items():
            if pool_name not in self.resource_pool_spec:
                raise KeyError(
                    f"role {role} is mapped to resource pool '{pool_name}', which is not in resource_pool_spec "
                    f"({sorted(self.resource_pool_spec)})"
                )
        for pool_name, process_on_nodes in self.resource_pool_spec.items():
            # One process per rank: colocation happens inside it (create_colocated_worker_cls), not by sharing.
            self.resource_pool_dict[pool_name] = RayResourcePool(
                process_on_nodes=list(process_on_nodes),
                max_colocate_count=1,
                name_prefix=pool_name,
                **self.pool_kwargs,
            )
        self._check_resource_available()

    def get_resource_pool(self, role: Role) -> RayResourcePool:
        if role not in self.mapping:
            raise KeyError(
                f"role {role} has no resource pool; add it to the mapping ({[str(r) for r in self.mapping]})"
            )
        return self.resource_pool_dict[self.mapping[role]]

    def get_n_gpus(self) -> int:
        return sum(n for nodes in self.resource_pool_spec.values() for n in nodes)

    def _check_resource_available(self) -> None:
        total = ray.cluster_resources()
        gpu_pools = [p for p in self.resource_pool_dict.values() if p.use_gpu]
        if gpu_pools:
            need = sum(p.world_size for p in gpu_pools)
            if need > total.get("GPU", 0):
                raise RuntimeError(
                    f"resource pools need {need} GPUs ({self.resource_pool_spec}) but the cluster has "
                    f"{total.get('GPU', 0):g}; lower trainer.n_gpus_per_node / trainer.nnodes"
                )
        need_cpu = sum(p.world_size * p.cpus_per_process for p in self.resource_pool_dict.values())
        if need_cpu > total.get("CPU", 0):
            raise RuntimeError(
                f"resource pools need {need_cpu:g} Ray CPUs ({self.resource_pool_spec}) but the cluster has "
                f"{total.get('CPU', 0):g}; start Ray with more logical CPUs (ray_kwargs.ray_init.num_cpus)"
            )
