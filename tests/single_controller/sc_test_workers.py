"""Worker classes the single-controller tests run remotely (a plain module so Ray workers can import it)."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

from verl.protocol import DataProto
from verl.single_controller.base import Dispatch, Execute, Worker, register


def _first_two(worker_group, *args, **kwargs):
    # Custom dispatch: rank i gets args[i]; collect: sum of per-rank outputs.
    return tuple(list(a[: worker_group.world_size]) for a in args), kwargs


def _sum(worker_group, outputs):
    return sum(outputs)


class DemoWorker(Worker):
    def __init__(self, scale: int = 1) -> None:
        super().__init__()
        self.scale = scale

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def double(self, data: DataProto) -> DataProto:
        return self._double(data)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def double_async(self, data: DataProto) -> DataProto:
        return self._double(data)

    def _double(self, data: DataProto) -> DataProto:
        x = data.batch["x"]
        return DataProto.from_dict(
            tensors={"y": x * 2 * self.scale, "rank": torch.full((len(data),), self.rank)},
            non_tensors={"tag": data.non_tensor_batch["tag"]},
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def halve(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(
            tensors={"x": data.batch["y"] / 2, "rank": torch.full((len(data),), self.rank)},
            non_tensors={"tag": data.non_tensor_batch["tag"]},
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def count_rows(self, data: DataProto) -> dict:
        return {"rank": self.rank, "rows": len(data), "x_sum": float(data.batch["x"].sum())}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def remember(self, value):
        self.value = value
        return (self.rank, value)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def recall(self):
        return self.value

    @register(dispatch_mode=Dispatch.RANK_ZERO)
    def whoami(self):
        return self.rank

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def echo(self, item):
        return (self.rank, item)

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def add(self, a, b):
        return a + b

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def only_rank_zero(self, item):
        return (self.rank, item)

    @register(dispatch_mode={"dispatch_fn": _first_two, "collect_fn": _sum})
    def custom(self, item):
        return item * 10

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env(self) -> dict:
        keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "RAY_LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "VERL_TEST_WORKER_ENV")
        return {**{k: os.environ.get(k) for k in keys}, "threads": torch.get_num_threads(), "pid": os.getpid(),
                "nice": os.nice(0)}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce_rank(self) -> float:
        self.init_torch_distributed()
        self.init_torch_distributed()  # idempotent
        t = torch.tensor([float(self.rank + 1)])
        dist.all_reduce(t)
        return t.item()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fail_on(self, bad_rank: int):
        if self.rank == bad_rank:
            raise ValueError(f"bad value on rank {bad_rank}")
        return "ok"


# Roles colocated in one process share module state; this dict is how the test sees that.
SHARED: dict = {}


class ActorRole(Worker):
    def __init__(self, lr: float) -> None:
        super().__init__()
        self.lr = lr
        self.weights = torch.full((4,), float(self.rank))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def publish(self, key: str) -> int:
        SHARED[key] = self.weights  # the same tensor object, not a copy
        return os.getpid()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def bump(self, delta: float) -> None:
        self.weights.add_(delta)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_log_prob(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"old_log_probs": data.batch["x"] * self.lr})


class RefRole(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def read(self, key: str) -> tuple[int, list[float], int]:
        return os.getpid(), SHARED[key].tolist(), self.rank

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        return DataProto.from_dict(tensors={"ref_log_prob": data.batch["x"] - 1})


class DistWorker(Worker):
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def where(self) -> dict:
        import ray

        return {"rank": self.rank, "node_id": ray.get_runtime_context().get_node_id(), "pid": os.getpid()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def gather_ranks(self) -> list[int]:
        self.init_torch_distributed()
        out = [torch.zeros(1) for _ in range(self.world_size)]
        dist.all_gather(out, torch.tensor([float(self.rank * 10 + 1)]))
        return [int(t.item()) for t in out]
