"""`Worker`: the base class of every class a worker group runs, one instance per rank.

The group puts the rank layout in the process environment before the class is built (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT — the variables torch.distributed's env:// rendezvous
reads), so user code can call `torch.distributed.init_process_group` in `__init__` like under torchrun. Rank 0
chooses the rendezvous address itself (its node's IP and a free port), because only it knows its node.
"""

from __future__ import annotations

import datetime
import os
import socket
import sys
from typing import Any, Callable

from verl.single_controller.base.decorator import Dispatch, Execute, register

# Set by the worker group when the user fixes the per-process thread count; otherwise derived from the node.
TORCH_THREADS_ENV = "VERL_TORCH_THREADS"


class Worker:
    """Knows its rank and world size and sets up the torch.distributed environment and thread count.

    The setup runs in `__new__`, so subclasses work whether or not they call `super().__init__()`, and the roles
    of a colocated process (several Worker classes built in one process) all see the same settings.
    """

    def __new__(cls, *args: Any, **kwargs: Any):
        instance = super().__new__(cls)
        instance._mesh_dispatch_info = {}  # mesh name -> (dp rank, collected?), see _register_dispatch_collect_info
        # `ray.remote(SomeWorker)` builds a driver-side ActorClass that inherits from SomeWorker; it is a handle
        # factory, not a rank, and must not touch the driver's environment.
        if not _is_ray_actor_class(cls):
            instance._setup_from_env()
        return instance

    def __init__(self, cuda_visible_devices: str | None = None) -> None:
        # Kept for upstream's signature; the rank layout was read in __new__.
        self._cuda_visible_devices = cuda_visible_devices

    def _setup_from_env(self) -> None:
        env = os.environ
        self._rank = int(env.get("RANK", "0"))
        self._world_size = int(env.get("WORLD_SIZE", "1"))
        self._local_rank = int(env.get("LOCAL_RANK", "0"))
        self._local_world_size = int(env.get("LOCAL_WORLD_SIZE", "1"))
        if not ("MASTER_ADDR" in env and "MASTER_PORT" in env):
            if self._rank != 0:
                raise RuntimeError(
                    f"Worker rank {self._rank} of {self._world_size} has no MASTER_ADDR/MASTER_PORT in its "
                    "environment; only rank 0 chooses them. Create workers through a WorkerGroup, or set both "
                    "variables to rank 0's address."
                )
            env["MASTER_ADDR"] = self._get_node_ip()
            env["MASTER_PORT"] = str(self._get_free_port())
        self._master_addr = env["MASTER_ADDR"]
        self._master_port = env["MASTER_PORT"]
        self._configure_threads()

    def _configure_threads(self) -> None:
        """One process per core share: the ranks on a node split its cores instead of each taking them all."""
        threads = int(os.environ.get(TORCH_THREADS_ENV, "0")) or default_threads_per_process(self._local_world_size)
        os.environ[TORCH_THREADS_ENV] = str(threads)
        # torch (and child processes such as a rollout engine) read these when they start.
        os.environ["OMP_NUM_THREADS"] = str(threads)
        os.environ["MKL_NUM_THREADS"] = str(threads)
        torch = sys.modules.get("torch")
        if torch is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def local_rank(self) -> int:
        return self._local_rank

    @property
    def local_world_size(self) -> int:
        return self._local_world_size

    @staticmethod
    def _get_node_ip() -> str:
        """This node's IP as Ray sees it (the address other nodes reach it by), or a local guess outside Ray."""
        try:
            import ray

            if ray.is_initialized():
                return ray.util.get_node_ip_address()
        except ImportError:
            pass
        return socket.gethostbyname(socket.gethostname())

    @staticmethod
    def _get_free_port() -> int:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def get_master_addr_port(self) -> tuple[str, str]:
        return self._master_addr, self._master_port

    def get_worker_info(self) -> dict[str, Any]:
        """Where this rank runs; the worker group asks once, to name workers in error messages."""
        node_id = None
        try:
            import ray

            if ray.is_initialized():
                node_id = ray.get_runtime_context().get_node_id()
        except ImportError:
            pass
        return {
            "rank": self._rank,
            "pid": os.getpid(),
            "node_ip": self._get_node_ip(),
            "node_id": node_id,
            "master_addr": self._master_addr,
            "master_port": self._master_port,
            "torch_threads": int(os.environ[TORCH_THREADS_ENV]),
        }

    def init_torch_distributed(self, backend: str | None = None, timeout_seconds: float | None = None) -> None:
        """Join the group's default process group (gloo on CPU, nccl on GPU); a no-op when already joined."""
        import torch.distributed as dist

        from verl.utils.device import get_nccl_backend

        if dist.is_initialized():
            return
        kwargs: dict[str, Any] = {}
        if timeout_seconds is not None:
            kwargs["timeout"] = datetime.timedelta(seconds=timeout_seconds)
        dist.init_process_group(
            backend=backend or get_nccl_backend(),
            init_method=f"tcp://{self._master_addr}:{self._master_port}",
            rank=self._rank,
            world_size=self._world_size,
            **kwargs,
        )

    def _register_dispatch_collect_info(self, mesh_name: str, dp_rank: int, is_collect: bool) -> None:
        """Declare this rank's data-parallel rank on ``mesh_name`` and whether its output is gathered, for methods
        registered with ``make_nd_compute_dataproto_dispatch_fn(mesh_name)``."""
        if mesh_name in self._mesh_dispatch_info:
            raise ValueError(f"rank {self.rank} already registered dispatch info for mesh {mesh_name!r}")
        self._mesh_dispatch_info[mesh_name] = (int(dp_rank), bool(is_collect))

    def _mesh_entry(self, mesh_name: str) -> tuple[int, bool]:
        if mesh_name not in self._mesh_dispatch_info:
            raise KeyError(f"rank {self.rank} has no dispatch info for mesh {mesh_name!r}; call "
                           f"self._register_dispatch_collect_info({mesh_name!r}, dp_rank, is_collect) in __init__")
        return self._mesh_dispatch_info[mesh_name]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_dispatch_info(self, mesh_name: str) -> int:
        return self._mesh_entry(mesh_name)[0]

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def _query_collect_info(self, mesh_name: str) -> bool:
        return self._mesh_entry(mesh_name)[1]

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def execute_with_func_generator(self, func: Callable, *args: Any, **kwargs: Any) -> Any:
        """Run a driver-supplied function on this rank's shard: `func(worker, *shards, **shards)`."""
        return func(self, *args, **kwargs)

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def execute_func_rank_zero(self, func: Callable, *args: Any, **kwargs: Any) -> Any:
        return func(*args, **kwargs)


def _is_ray_actor_class(cls: type) -> bool:
    ray_actor = sys.modules.get("ray.actor")
    return ray_actor is not None and issubclass(cls, ray_actor.ActorClass)


def default_threads_per_process(processes_on_node: int) -> int:
    """The node's usable cores divided among the group's processes on it (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, processes_on_node))
