"""Worker classes for the nd-compute and custom-dispatch-mode tests (imported by the worker processes too)."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from verl.protocol import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import (
    Dispatch,
    make_nd_compute_dataproto_dispatch_fn,
    register,
    register_dispatch_mode,
)


def _every_rank_gets_all(worker_group, *args, **kwargs):
    return tuple([a] * worker_group.world_size for a in args), {k: [v] * worker_group.world_size for k, v in kwargs.items()}


def _sum_of_ranks(worker_group, outputs):
    return sum(outputs)


# registered when this module is imported, in the driver and in each worker process alike
if "SC_TEST_SUM" not in Dispatch.__members__:
    register_dispatch_mode("SC_TEST_SUM", _every_rank_gets_all, _sum_of_ranks)


class MeshWorker(Worker):
    """Two ranks as one data-parallel rank each ("train" mesh) and as one shared rank ("tp" mesh: both ranks hold
    DP rank 0, only rank 0 is collected)."""

    def __init__(self) -> None:
        super().__init__()
        self._register_dispatch_collect_info("train", dp_rank=self.rank, is_collect=True)
        self._register_dispatch_collect_info("tp", dp_rank=0, is_collect=self.rank == 0)

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"))
    def add_rank(self, data: DataProto) -> DataProto:
        data.batch["out"] = data.batch["x"] + 10 * self.rank
        return data

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="train"), blocking=False)
    def add_rank_td(self, data: TensorDict) -> TensorDict:
        data = data.contiguous()
        data["out"] = data["x"] + 10 * self.rank
        return data

    @register(dispatch_mode=make_nd_compute_dataproto_dispatch_fn(mesh_name="tp"))
    def rows_seen(self, data: DataProto) -> DataProto:
        data.batch["seen_by"] = torch.full((len(data),), self.rank)
        return data

    @register(dispatch_mode=Dispatch.SC_TEST_SUM)
    def rank_plus(self, value: int) -> int:
        return self.rank + value
