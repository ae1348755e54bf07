"""Upstream's dispatch API: the registry and its helpers at verl.single_controller.base.decorator, custom modes,
and nd-compute dispatch by mesh (Worker._register_dispatch_collect_info)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from verl.protocol import DataProto
from verl.single_controller.base.decorator import (
    DISPATCH_MODE_FN_REGISTRY,
    Dispatch,
    get_predefined_dispatch_fn,
    make_nd_compute_dataproto_dispatch_fn,
    update_dispatch_mode,
)
from verl.single_controller.base.dispatch import PAD_SIZE_KWARG, unpad_result


class FakeMeshGroup:
    """Four ranks: DP ranks 0, 0, 1, 1 (two tensor-parallel pairs); ranks 0 and 2 are collected."""

    world_size = 4

    def __init__(self) -> None:
        self._dispatch_info, self._collect_info, self.queries = {}, {}, 0

    def _query_dispatch_info(self, mesh_name):
        self.queries += 1
        return [0, 0, 1, 1]

    def _query_collect_info(self, mesh_name):
        return [True, False, True, False]


def test_registry_has_every_builtin_mode_and_update_replaces_one():
    assert set(DISPATCH_MODE_FN_REGISTRY) == set(Dispatch)  # modes added by register_dispatch_mode included
    fns = get_predefined_dispatch_fn(Dispatch.ONE_TO_ALL)
    assert set(fns) == {"dispatch_fn", "collect_fn"}
    saved = dict(fns)
    try:
        update_dispatch_mode(Dispatch.ONE_TO_ALL, fns["dispatch_fn"], lambda wg, outputs: "replaced")
        assert get_predefined_dispatch_fn(Dispatch.ONE_TO_ALL)["collect_fn"](None, [1]) == "replaced"
    finally:
        DISPATCH_MODE_FN_REGISTRY[Dispatch.ONE_TO_ALL] = saved
    with pytest.raises(ValueError, match="collect_fn"):
        update_dispatch_mode(Dispatch.ONE_TO_ALL, fns["dispatch_fn"], None)


def test_nd_dispatch_gives_tp_peers_the_same_chunk_and_collects_one_per_dp_rank():
    group, mode = FakeMeshGroup(), make_nd_compute_dataproto_dispatch_fn("train")
    data = DataProto.from_dict({"x": torch.arange(3)}, {"id": np.array(["a", "b", "c"], dtype=object)})
    args, kwargs = mode["dispatch_fn"](group, data)
    assert kwargs == {PAD_SIZE_KWARG: 1}  # 3 rows over 2 DP ranks: one pad row
    assert [c.batch["x"].tolist() for c in args[0]] == [[0, 1], [0, 1], [2, 0], [2, 0]]
    outputs = [c.select() for c in args[0]]
    result = unpad_result(mode["collect_fn"](group, outputs), kwargs[PAD_SIZE_KWARG])
    assert result.batch["x"].tolist() == [0, 1, 2] and result.non_tensor_batch["id"].tolist() == ["a", "b", "c"]
    mode["dispatch_fn"](group, data)
    assert group.queries == 1  # asked once per mesh, then cached
    td = TensorDict({"x": torch.arange(4)}, batch_size=[4])
    td_args, td_kwargs = mode["dispatch_fn"](group, td)
    assert td_kwargs == {} and [c["x"].tolist() for c in td_args[0]] == [[0, 1], [0, 1], [2, 3], [2, 3]]
    assert mode["collect_fn"](group, td_args[0])["x"].tolist() == [0, 1, 2, 3]


@pytest.mark.usefixtures("local_ray")
def test_nd_compute_and_custom_mode_on_ray_workers():
    import sc_mesh_workers

    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False, max_colocate_count=1, name_prefix="mesh")
    group = RayWorkerGroup(pool, RayClassWithInitArgs(sc_mesh_workers.MeshWorker), name_prefix="mesh")
    out = group.add_rank(DataProto.from_dict({"x": torch.arange(5)}))
    assert out.batch["out"].tolist() == [0, 1, 2, 13, 14]  # rows 0-2 on DP rank 0, 3-4 (+1 pad) on DP rank 1
    future = group.add_rank_td(TensorDict({"x": torch.arange(4)}, batch_size=[4]))
    assert future.get()["out"].tolist() == [0, 1, 12, 13]
    seen = group.rows_seen(DataProto.from_dict({"x": torch.arange(3)}))
    assert seen.batch["seen_by"].tolist() == [0, 0, 0]  # one DP rank: both ranks get all rows, rank 0 collected
    assert group.rank_plus(5) == 5 + 6  # Dispatch.SC_TEST_SUM: every rank gets 5, the results are summed
