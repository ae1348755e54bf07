"""Dispatch/collect functions, @register checks and resource-pool layout, without Ray processes."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verl.protocol import DataProto, DataProtoFuture
from verl.single_controller.base import Dispatch, Execute, ResourcePool, Worker, register
from verl.single_controller.base.decorator import get_registered_attrs, registered_methods
from verl.single_controller.base.dispatch import (
    PAD_SIZE_KWARG,
    collect_dp_compute_data_proto,
    dispatch_dp_compute_data_proto,
    dispatch_dp_compute_data_proto_with_func,
    dispatch_one_to_all,
    unpad_result,
)
from verl.single_controller.ray.resource_pool import RayResourcePool


class FakeGroup:
    def __init__(self, world_size: int) -> None:
        self.world_size = world_size


def rows(n: int) -> DataProto:
    return DataProto.from_dict(
        tensors={"x": torch.arange(n, dtype=torch.float32)},
        non_tensors={"id": np.array([f"r{i}" for i in range(n)], dtype=object)},
    )


def test_dp_proto_split_pads_5_rows_for_2_ranks():
    (chunks,), kwargs = dispatch_dp_compute_data_proto(FakeGroup(2), rows(5))
    assert kwargs == {PAD_SIZE_KWARG: 1}
    assert [c.batch["x"].tolist() for c in chunks] == [[0.0, 1.0, 2.0], [3.0, 4.0, 0.0]]


def test_dp_proto_split_without_padding_and_kwargs():
    args, kwargs = dispatch_dp_compute_data_proto(FakeGroup(2), data=rows(4))
    assert args == () and PAD_SIZE_KWARG not in kwargs
    assert [c.batch["x"].tolist() for c in kwargs["data"]] == [[0.0, 1.0], [2.0, 3.0]]


def test_dp_proto_rejects_mismatched_lengths_and_non_protos():
    with pytest.raises(ValueError, match="same length"):
        dispatch_dp_compute_data_proto(FakeGroup(2), rows(4), other=rows(6))
    with pytest.raises(TypeError, match="argument #1 is a int"):
        dispatch_dp_compute_data_proto(FakeGroup(2), rows(4), 3)


def test_with_func_broadcasts_the_function():
    def f(worker, data):
        return data

    (funcs, chunks), kwargs = dispatch_dp_compute_data_proto_with_func(FakeGroup(3), f, rows(3))
    assert funcs == [f, f, f] and [len(c) for c in chunks] == [1, 1, 1] and kwargs == {}
    with pytest.raises(TypeError, match="function as the first argument"):
        dispatch_dp_compute_data_proto_with_func(FakeGroup(2), rows(2))


def test_one_to_all_replicates():
    args, kwargs = dispatch_one_to_all(FakeGroup(3), "a", k=1)
    assert args == (["a", "a", "a"],) and kwargs == {"k": [1, 1, 1]}


@settings(max_examples=40, deadline=None)
@given(n=st.integers(min_value=1, max_value=23), world=st.integers(min_value=1, max_value=5))
def test_split_collect_unpad_roundtrip(n, world):
    data = rows(n)
    (chunks,), kwargs = dispatch_dp_compute_data_proto(FakeGroup(world), data)
    pad = kwargs.get(PAD_SIZE_KWARG, 0)
    assert len(chunks) == world and len({len(c) for c in chunks}) == 1
    assert pad == (world - n % world) % world
    out = unpad_result(collect_dp_compute_data_proto(FakeGroup(world), chunks), pad)
    assert out.batch["x"].tolist() == list(range(n))
    assert list(out.non_tensor_batch["id"]) == [f"r{i}" for i in range(n)]


def test_collect_rejects_non_dataproto_outputs():
    with pytest.raises(TypeError, match=r"\(1, 'dict'\)"):
        collect_dp_compute_data_proto(FakeGroup(2), [rows(1), {"a": 1}])


def test_register_records_settings_and_checks_them():
    class W(Worker):
        @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
        def f(self, data):
            return data

        def plain(self):
            return 1

    attrs = get_registered_attrs(W.f)
    assert attrs == {"dispatch_mode": Dispatch.DP_COMPUTE_PROTO, "execute_mode": Execute.ALL, "blocking": False}
    names = registered_methods(W)
    assert "f" in names and "plain" not in names
    # Worker's own helpers are registered for every group.
    assert {"execute_with_func_generator", "execute_func_rank_zero"} <= set(names)
    with pytest.raises(ValueError, match="cannot split data"):
        register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, execute_mode=Execute.RANK_ZERO)
    with pytest.raises(ValueError, match="collect_fn"):
        register(dispatch_mode={"dispatch_fn": lambda wg, *a, **k: (a, k)})
    with pytest.raises(TypeError, match="Dispatch member"):
        register(dispatch_mode="DP_COMPUTE_PROTO")


@pytest.fixture
def restored_environ():
    # Worker writes MASTER_ADDR/PORT and thread settings into the process environment; undo that here.
    saved = dict(os.environ)
    yield os.environ
    os.environ.clear()
    os.environ.update(saved)


def test_worker_outside_a_group_is_rank_zero_of_one(restored_environ):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "VERL_TORCH_THREADS"):
        restored_environ.pop(key, None)
    threads = torch.get_num_threads()
    try:
        w = Worker()
        assert (w.rank, w.world_size) == (0, 1)
        addr, port = w.get_master_addr_port()
        assert addr and int(port) > 0
    finally:
        torch.set_num_threads(threads)


def test_nonzero_rank_without_master_address_fails(restored_environ):
    restored_environ.update(RANK="1", WORLD_SIZE="2")
    restored_environ.pop("MASTER_ADDR", None)
    restored_environ.pop("MASTER_PORT", None)
    with pytest.raises(RuntimeError, match="MASTER_ADDR"):
        Worker()


def test_resource_pool_layout():
    pool = ResourcePool(process_on_nodes=[2, 1])
    assert pool.world_size == 3
    assert pool.local_rank_list() == [0, 1, 0]
    assert pool.local_world_size_list() == [2, 2, 1]
    assert pool.node_of_rank_list() == [0, 0, 1]
    with pytest.raises(ValueError, match="positive integers"):
        ResourcePool(process_on_nodes=[2, 0])


def test_ray_pool_bundles_per_node():
    pool = RayResourcePool(process_on_nodes=[2, 1], use_gpu=False, max_colocate_count=2, cpus_per_process=0.5)
    assert pool.bundles() == [{"CPU": 1.0}, {"CPU": 0.5}]
    assert pool.actor_resources() == {"num_cpus": 0.25}
    gpu = RayResourcePool(process_on_nodes=[4], use_gpu=True, max_colocate_count=1)
    assert gpu.bundles() == [{"CPU": 4.0, "GPU": 4}]
    assert gpu.actor_resources() == {"num_cpus": 1.0, "num_gpus": 1.0}


def test_padding_carries_through_a_future_from_a_same_sized_group():
    padded_future = unpad_result(DataProtoFuture.concat(["ref0", "ref1"]), 1)
    (chunks,), kwargs = dispatch_dp_compute_data_proto(FakeGroup(2), padded_future)
    assert kwargs == {PAD_SIZE_KWARG: 1}
    assert all(c.collect_fn is DataProto.concat and c.futures == ["ref0", "ref1"] for c in chunks)
    # A group of another size cannot reuse that padding: the future is split as the unpadded rows.
    (chunks,), kwargs = dispatch_dp_compute_data_proto(FakeGroup(3), padded_future)
    assert kwargs == {} and all(c.collect_fn is padded_future.collect_fn for c in chunks)
