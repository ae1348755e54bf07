"""`WorkerGroup`: the driver's handle on N ranks of one worker class.

Every @register-ed method of the class becomes a method of the group; calling it runs
dispatch -> execute on the ranks -> wait -> collect. The engine (Ray) supplies how to execute and wait; everything
else lives here so it reads the same whatever runs the processes.
"""

from __future__ import annotations

from typing import Any, Callable

from verl.single_controller.base.deadlines import WorkerDeadlines, count_samples
from verl.single_controller.base.decorator import Execute, registered_methods
from verl.single_controller.base.dispatch import PAD_SIZE_KWARG, get_predefined_dispatch_fn, unpad_result


class ResourcePool:
    """How many processes run on each node: `process_on_nodes=[2, 2]` is two nodes with two ranks each."""

    def __init__(
        self, process_on_nodes: list[int] | None = None, max_colocate_count: int = 10, n_gpus_per_node: int = 8
    ):
        process_on_nodes = list(process_on_nodes or [])
        if any((not isinstance(n, int)) or n < 1 for n in process_on_nodes):
            raise ValueError(f"process_on_nodes must be positive integers (processes per node), got {process_on_nodes}")
        if max_colocate_count < 1:
            raise ValueError(f"max_colocate_count must be >= 1, got {max_colocate_count}")
        self._store = process_on_nodes
        self.max_colocate_count = max_colocate_count
        self.n_gpus_per_node = n_gpus_per_node

    def add_node(self, process_count: int) -> None:
        self._store.append(process_count)

    @property
    def store(self) -> list[int]:
        return self._store

    @property
    def world_size(self) -> int:
        return sum(self._store)

    def __call__(self) -> list[int]:
        return self._store

    def local_world_size_list(self) -> list[int]:
        """For each global rank, how many ranks share its node."""
        return [n for n in self._store for _ in range(n)]

    def local_rank_list(self) -> list[int]:
        """For each global rank, its index on its node."""
        return [i for n in self._store for i in range(n)]

    def node_of_rank_list(self) -> list[int]:
        """For each global rank, the index of its node in process_on_nodes."""
        return [node for node, n in enumerate(self._store) for _ in range(n)]


class ClassWithInitArgs:
    """A class plus the arguments to build it with, so the group can build it once per rank, remotely."""

    def __init__(self, cls: type, *args: Any, **kwargs: Any) -> None:
        self.cls = cls
        self.args = args
        self.kwargs = kwargs

    def __call__(self) -> Any:
        return self.cls(*self.args, **self.kwargs)


class WorkerGroup:
    """Ranks of one worker class, with its @register-ed methods bound as group methods."""

    def __init__(self, resource_pool: ResourcePool | None, **kwargs: Any) -> None:
        self._is_init_with_detached_workers = resource_pool is None
        self._procecss_dispatch_config = resource_pool() if resource_pool is not None else None
        self._workers: list[Any] = []
        self._worker_names: list[str] = []
        self._bound_method_names: list[str] = []
        # Shown in error messages: which job this group does.
        self.roles: list[str] = []
        self.name_prefix: str = kwargs.get("name_prefix") or "worker_group"
        # How long each blocking call may take (None: no deadline); see deadlines.py.
        self.deadlines: WorkerDeadlines | None = kwargs.get("deadlines")
        # Per mesh: each rank's data-parallel rank and whether its output is collected (nd-compute dispatch).
        self._dispatch_info: dict[str, list[int]] = {}
        self._collect_info: dict[str, list[bool]] = {}

    @property
    def world_size(self) -> int:
        return len(self._workers)

    @property
    def workers(self) -> list[Any]:
        return self._workers

    @property
    def worker_names(self) -> list[str]:
        return self._worker_names

    # ---- what an engine provides -------------------------------------------------------------------------------
    def execute_all_async(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        raise NotImplementedError

    def execute_rank_zero_async(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def wait_for_results(self, handles: list[Any], ranks: list[int], method_name: str,
                         samples: int = 0) -> list[Any]:
        """Block until every handle has a value; raise the first failure with the rank that produced it.
        `samples` (rows of the call's batch) scales the call's deadline (``self.deadlines``)."""
        raise NotImplementedError

    # ---- generic call path -------------------------------------------------------------------------------------
    def execute_all_sync(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        samples = count_samples(args, kwargs)
        handles = self.execute_all_async(method_name, *args, **kwargs)
        return self.wait_for_results(handles, list(range(self.world_size)), method_name, samples)

    def execute_all(self, method_name: str, *args: Any, **kwargs: Any) -> list[Any]:
        return self.execute_all_async(method_name, *args, **kwargs)

    def execute_rank_zero_sync(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        samples = count_samples(args, kwargs)
        handle = self.execute_rank_zero_async(method_name, *args, **kwargs)
        return self.wait_for_results([handle], [0], method_name, samples)[0]

    def execute_rank_zero(self, method_name: str, *args: Any, **kwargs: Any) -> Any:
        return self.execute_rank_zero_async(method_name, *args, **kwargs)

    def _call_registered(self, method_name: str, attrs: dict, args: tuple, kwargs: dict) -> Any:
        blocking = attrs["blocking"]
        if attrs["execute_mode"] is Execute.RANK_ZERO:
            if blocking:
                return self.execute_rank_zero_sync(method_name, *args, **kwargs)
            return self.execute_rank_zero_async(method_name, *args, **kwargs)

        fns = get_predefined_dispatch_fn(attrs["dispatch_mode"])
        samples = count_samples(args, kwargs)  # before dispatch splits (and pads) the batch
        args, kwargs = fns["dispatch_fn"](self, *args, **kwargs)
        kwargs = dict(kwargs)
        pad_size = kwargs.pop(PAD_SIZE_KWARG, 0)
        handles = self.execute_all_async(method_name, *args, **kwargs)
        if blocking:
            handles = self.wait_for_results(handles, list(range(self.world_size)), method_name, samples)
        return unpad_result(fns["collect_fn"](self, handles), pad_size)

    def _make_group_method(self, method_name: str, attrs: dict, doc: str | None) -> Callable:
        def group_method(*args: Any, **kwargs: Any) -> Any:
            return self._call_registered(method_name, attrs, args, kwargs)

        group_method.__name__ = method_name
        group_method.__qualname__ = f"{type(self).__name__}.{method_name}"
        group_method.__doc__ = doc
        return group_method

    def _bind_worker_method(self, user_defined_cls: type, method_names: dict[str, str] | None = None) -> list[str]:
        """Bind every @register-ed method of the class onto this group.

        `method_names` maps remote method name -> name on the group (used by role views of a colocated group);
        by default both are the same.
        """
        bound = []
        for remote_name, attrs in registered_methods(user_defined_cls).items():
            group_name = remote_name if method_names is None else method_names.get(remote_name)
            if group_name is None:
                continue
            if group_name in self._bound_method_names:
                continue
            if hasattr(self, group_name):
                raise ValueError(
                    f"{user_defined_cls.__name__}.{remote_name} is registered but {type(self).__name__} already "
                    f"has an attribute '{group_name}'; rename the worker method."
                )
            doc = getattr(getattr(user_defined_cls, remote_name, None), "__doc__", None)
            setattr(self, group_name, self._make_group_method(remote_name, attrs, doc))
            self._bound_method_names.append(group_name)
            bound.append(group_name)
        return bound
