"""A 2-rank RayWorkerGroup on local Ray: every dispatch mode, futures, torch.distributed, errors."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import torch

from verl.protocol import DataProto, DataProtoFuture
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    WorkerGroupError,
)


def make_data(n: int) -> DataProto:
    return DataProto.from_dict(
        tensors={"x": torch.arange(n, dtype=torch.float32)},
        non_tensors={"tag": np.array([f"row{i}" for i in range(n)], dtype=object)},
    )


def build_group(worker_cls: type, prefix: str, worker_env: dict | None = None, **init_kwargs):
    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False, max_colocate_count=1, name_prefix=prefix)
    cls = RayClassWithInitArgs(worker_cls, **init_kwargs)
    return pool, RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls, name_prefix=prefix, worker_env=worker_env)


@pytest.fixture(scope="module")
def wg(local_ray):
    import sc_test_workers

    env_before = dict(os.environ)
    pool, group = build_group(sc_test_workers.DemoWorker, "demo", worker_env={"VERL_TEST_WORKER_ENV": "on"}, scale=1)
    # Building the group (which wraps the class with ray.remote here) must not change the driver's environment.
    assert dict(os.environ) == env_before
    yield group
    group.shutdown()
    pool.remove()


def test_init_ray_started_this_instance(local_ray):
    import ray

    from verl.utils.ray_utils import init_ray

    assert local_ray.init_kwargs["_temp_dir"] == os.path.join(local_ray.run_dir, "ray")
    assert local_ray.init_kwargs["include_dashboard"] is False
    assert os.path.isdir(os.path.join(local_ray.run_dir, "ray", "session_latest"))
    assert ray.cluster_resources()["CPU"] == 4
    assert ray.get_runtime_context().gcs_address.startswith("127.0.0.1:")  # loopback only
    assert init_ray(None) is None  # already running: nothing to do


def test_rank_environment_and_threads(wg):
    envs = wg.env()
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert all(e["WORLD_SIZE"] == "2" and e["LOCAL_WORLD_SIZE"] == "2" for e in envs)
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1"]
    # Rank 0 chose the rendezvous address; rank 1 was given the same one.
    assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"] and envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]
    assert len({e["pid"] for e in envs}) == 2
    # Two ranks on this node split its cores.
    expected_threads = max(1, len(os.sched_getaffinity(0)) // 2)
    assert [e["threads"] for e in envs] == [expected_threads, expected_threads]
    # Workers compete for the CPU as the driver does, instead of Ray's default nice 15 (init_ray sets that).
    assert [e["nice"] for e in envs] == [os.nice(0), os.nice(0)]


def test_worker_env_reaches_every_worker_with_ray_local_world_size(wg):
    envs = wg.env()
    assert [e["VERL_TEST_WORKER_ENV"] for e in envs] == ["on", "on"]  # RayWorkerGroup(worker_env=...), as upstream
    assert [e["RAY_LOCAL_WORLD_SIZE"] for e in envs] == ["2", "2"]
    assert "VERL_TEST_WORKER_ENV" not in os.environ  # the driver's own environment is untouched


def test_worker_env_cannot_override_the_rank_variables():
    with pytest.raises(ValueError, match="RANK"):
        RayWorkerGroup(resource_pool=None, ray_cls_with_init=None, worker_env={"RANK": "3"})


def test_dp_compute_proto_pads_splits_and_unpads(wg):
    out = wg.double(make_data(5))
    # 5 rows on 2 ranks: padded to 6, rank 0 gets rows 0-2, rank 1 rows 3-4 plus a pad copy of row 0.
    assert len(out) == 5
    assert out.batch["y"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]
    assert out.batch["rank"].tolist() == [0, 0, 0, 1, 1]
    assert list(out.non_tensor_batch["tag"]) == ["row0", "row1", "row2", "row3", "row4"]


def test_dp_compute_metric_returns_per_rank_values(wg):
    metrics = wg.count_rows(make_data(5))
    # rank 1's chunk is rows 3, 4 and the pad row 0.
    assert metrics == [
        {"rank": 0, "rows": 3, "x_sum": 0.0 + 1.0 + 2.0},
        {"rank": 1, "rows": 3, "x_sum": 3.0 + 4.0 + 0.0},
    ]


def test_one_to_all_rank_zero_all_to_all_dp_compute(wg):
    assert wg.remember({"k": 1}) == [(0, {"k": 1}), (1, {"k": 1})]
    assert wg.recall() == [{"k": 1}, {"k": 1}]
    assert wg.whoami() == 0
    assert wg.echo(["a", "b"]) == [(0, "a"), (1, "b")]
    assert wg.echo("same") == [(0, "same"), (1, "same")]
    assert wg.add([1, 2], b=[10, 20]) == [11, 22]
    assert wg.only_rank_zero("x") == (0, "x")
    assert wg.custom([3, 4, 5]) == 30 + 40


def test_dp_compute_rejects_wrong_arguments(wg):
    with pytest.raises(TypeError, match="list of 2 items"):
        wg.add([1, 2, 3], b=[1, 2])
    with pytest.raises(TypeError, match="must be a DataProto"):
        wg.double([1, 2])


def test_non_blocking_futures_chain(wg):
    first = wg.double_async(make_data(4))
    assert isinstance(first, DataProtoFuture)
    # The future goes straight into the next call; each worker resolves its own chunk.
    out = wg.halve(first)
    assert out.batch["x"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert out.batch["rank"].tolist() == [0, 0, 1, 1]


def test_future_chain_keeps_padding(wg):
    # 5 rows: the first call pads to 6; the padded rows travel in the future and come off at the end.
    out = wg.halve(wg.double_async(make_data(5)))
    assert out.batch["x"].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert out.batch["rank"].tolist() == [0, 0, 0, 1, 1]
    assert list(out.non_tensor_batch["tag"]) == ["row0", "row1", "row2", "row3", "row4"]
    # Mixed with a concrete DataProto of the same length.
    mixed = wg.execute_with_func_generator(_sum_two, wg.double_async(make_data(5)), make_data(5))
    assert mixed.batch["s"].tolist() == [0.0, 3.0, 6.0, 9.0, 12.0]


def _sum_two(worker, doubled: DataProto, data: DataProto) -> DataProto:
    return DataProto.from_dict(tensors={"s": doubled.batch["y"] + data.batch["x"]})


def test_non_blocking_future_passed_to_next_call(wg):
    fut = wg.double_async(make_data(4))
    out = wg.execute_with_func_generator(_rows_times_three, fut)
    assert out.batch["z"].tolist() == [0.0, 6.0, 12.0, 18.0]


def test_non_blocking_with_padding_unpads_on_get(wg):
    fut = wg.double_async(make_data(5))
    assert isinstance(fut, DataProtoFuture)
    assert fut.get().batch["y"].tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]


def _rows_times_three(worker, data: DataProto) -> DataProto:
    return DataProto.from_dict(tensors={"z": data.batch["y"] * 3})


def test_gloo_all_reduce_agrees_across_ranks(wg):
    # (0 + 1) + (1 + 1) = 3 on both ranks.
    assert wg.all_reduce_rank() == [3.0, 3.0]


def test_remote_exception_keeps_type_message_and_rank(wg):
    with pytest.raises(ValueError, match="bad value on rank 1") as info:
        wg.fail_on(1)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert "rank 1 of 2" in notes and "'demo'" in notes and "fail_on" in notes
    assert "raise ValueError" in notes  # the remote traceback
    # The group is still usable after a method raised.
    assert wg.fail_on(5) == ["ok", "ok"]


def test_killed_worker_reported_within_seconds(local_ray):
    import sc_light_workers

    pool, group = build_group(sc_light_workers.FragileWorker, "doomed")
    try:
        # torch imported after the Worker set up the process gets the rank's share of cores too.
        share = max(1, len(os.sched_getaffinity(0)) // 2)
        assert group.threads_env() == [{"omp": str(share), "torch": share}] * 2
        start = time.monotonic()
        with pytest.raises(WorkerGroupError) as info:
            group.die_on(1, others_sleep_s=600)
        elapsed = time.monotonic() - start
        # a death noticed only when the others return would take 600 s; half that is a generous deadline
        assert elapsed < 300, f"took {elapsed:.1f} s"
        msg = str(info.value)
        assert group.worker_names[1] in msg and "rank 1 of 2" in msg and "FragileWorker" in msg and "die_on" in msg
    finally:
        group.shutdown()
        pool.remove()


def test_failing_init_is_reported_at_creation(local_ray):
    import sc_light_workers

    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False, max_colocate_count=1, name_prefix="broken")
    try:
        with pytest.raises(WorkerGroupError, match="missing config key on rank 1") as info:
            RayWorkerGroup(pool, RayClassWithInitArgs(sc_light_workers.BrokenInitWorker), name_prefix="broken")
        assert "rank 1 of 2" in str(info.value)
    finally:
        pool.remove()


def test_full_pool_refuses_another_group(wg):
    import sc_light_workers

    # The demo group fills its pool (max_colocate_count=1): a second group would wait forever, so it is refused.
    with pytest.raises(RuntimeError, match="max_colocate_count"):
        RayWorkerGroup(wg.resource_pool, RayClassWithInitArgs(sc_light_workers.FragileWorker), name_prefix="extra")


def test_pool_larger_than_cluster_fails_fast(local_ray):
    import sc_test_workers

    pool = RayResourcePool(process_on_nodes=[100], use_gpu=False, name_prefix="huge")
    with pytest.raises(RuntimeError, match="needs 100 CPU"):
        RayWorkerGroup(pool, RayClassWithInitArgs(sc_test_workers.DemoWorker), name_prefix="huge")
