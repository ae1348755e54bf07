"""A worker class with its constructor arguments and Ray actor options: what a worker group starts N of."""

from __future__ import annotations

import copy
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from verl.single_controller.base.worker_group import ClassWithInitArgs


def user_class(cls: Any) -> type:
    """The plain Python class behind a `ray.remote(...)` actor class (or the class itself)."""
    metadata = getattr(cls, "__ray_metadata__", None)
    return metadata.modified_class if metadata is not None else cls


class RayClassWithInitArgs(ClassWithInitArgs):
    """A worker class (plain or `ray.remote`-decorated) with its constructor arguments and extra actor options."""

    def __init__(self, cls: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(cls, *args, **kwargs)
        self._options: dict[str, Any] = {}
        self._additional_resource: dict[str, float] = {}
        self.colocated_roles: list[str] | None = None
        self.role_method_names: dict[str, dict[str, str]] | None = None
        # upstream's flag for a class built on create_colocated_worker_raw_cls; set by user code, read by nobody
        # here (RayWorkerGroup.fuse finds the roles on the class itself)
        self.fused_worker_used = False

    def set_additional_resource(self, additional_resource: dict[str, float]) -> None:
        self._additional_resource = dict(additional_resource)

    def update_options(self, options: dict[str, Any]) -> None:
        """Extra `ActorClass.options(...)`; env_vars in a runtime_env are merged, not replaced."""
        for key, value in options.items():
            if key == "runtime_env":
                merged = copy.deepcopy(self._options.get("runtime_env", {}))
                env_vars = {**merged.get("env_vars", {}), **value.get("env_vars", {})}
                merged.update(value)
                if env_vars:
                    merged["env_vars"] = env_vars
                self._options["runtime_env"] = merged
            else:
                self._options[key] = value

    def user_class(self) -> type:
        return user_class(self.cls)

    def __call__(
        self,
        placement_group,
        placement_group_bundle_idx: int,
        resources: dict[str, float],
        env_vars: dict[str, str],
        name: str | None = None,
        detached: bool = False,
    ):
        """Start one actor of this class in the given bundle; returns its handle."""
        actor_cls = self.cls if hasattr(self.cls, "__ray_metadata__") else ray.remote(self.cls)
        options: dict[str, Any] = copy.deepcopy(self._options)
        runtime_env = options.pop("runtime_env", {})
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **env_vars}
        options.update(
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=placement_group_bundle_idx
            ),
            runtime_env=runtime_env,
            **resources,
        )
        if self._additional_resource:
            options["resources"] = {**options.get("resources", {}), **self._additional_resource}
        if name:
            options["name"] = name
        if detached:
            options["lifetime"] = "detached"
        return actor_cls.options(**options).remote(*self.args, **self.kwargs)
