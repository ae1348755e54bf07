"""Deadlines on the driver's waits: a call or a start-up that overruns raises WorkerDeadlineError naming the stage,
the method and the ranks still running, and the group's workers are killed so nothing hangs."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller.base.deadlines import WorkerDeadlines, count_samples, stage_of
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    WorkerDeadlineError,
    WorkerGroupError,
    create_colocated_worker_cls,
)


def rows(n: int, seconds_per_row: float = 0.0) -> DataProto:
    data = DataProto.from_dict(tensors={"x": torch.arange(n, dtype=torch.float32)},
                               non_tensors={"tag": np.array([str(i) for i in range(n)], dtype=object)})
    data.meta_info["seconds_per_row"] = seconds_per_row
    return data


def test_deadline_is_base_plus_per_sample_and_startup_is_flat():
    d = WorkerDeadlines(startup_s=300, call_s=100, per_sample_s=2)
    assert d.for_call("update_actor", samples=8) == 100 + 8 * 2
    assert d.for_call("save_checkpoint") == 100
    assert d.for_call("init_model", samples=8) == 300 and d.for_call("__init__") == 300
    assert "trainer.worker_call_timeout_s=100 + 8 samples x trainer.worker_call_timeout_per_sample_s=2" == (
        d.explain("update_actor", 8))
    assert d.explain("init_model") == "trainer.ray_wait_register_center_timeout=300"
    assert WorkerDeadlines(call_s=None).for_call("update_actor", 8) is None  # no deadline
    assert stage_of("generate_sequences") == "gen" and stage_of("init_model") == "worker start-up"
    assert stage_of("my_method") == "my_method"
    assert count_samples((rows(5), 3), {"other": rows(2)}) == 7
    with pytest.raises(ValueError, match="call_s must be >= 0"):
        WorkerDeadlines(call_s=-1)


def build(worker_cls, prefix: str, deadlines: WorkerDeadlines, **init_kwargs):
    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False, max_colocate_count=1, name_prefix=prefix)
    try:
        group = RayWorkerGroup(pool, RayClassWithInitArgs(worker_cls, **init_kwargs), name_prefix=prefix,
                               deadlines=deadlines)
    except BaseException:
        pool.remove()
        raise
    return pool, group


def test_hung_rank_surfaces_by_its_deadline_and_the_group_is_killed(local_ray):
    import sc_deadline_workers

    # The healthy rank answers at once, but on a loaded box "at once" can take seconds: warm both ranks up with a
    # call that has no deadline to race, and give the healthy rank's instant answer a generous deadline, so the
    # ranks still pending when it passes are decided by what the ranks do (one hangs), not by the box's latency.
    call_s = 10
    pool, group = build(sc_deadline_workers.HangingWorker, "hang", WorkerDeadlines(startup_s=60, call_s=call_s))
    try:
        assert group.ping() == [0, 1]
        start = time.monotonic()
        with pytest.raises(WorkerDeadlineError) as info:
            group.hang_on(1, hang_s=600)
        assert time.monotonic() - start >= call_s  # never before its deadline (a lower bound: no load can break it)
        err = info.value
        assert err.stage == "hang_on" and err.method == "hang_on" and err.pending_ranks == [1]
        msg = str(err)
        assert "stage hang_on, method hang_on" in msg and "ranks still running: 1 of 2" in msg
        assert group.worker_names[1] in msg and f"trainer.worker_call_timeout_s={call_s}" in msg
        assert isinstance(err, WorkerGroupError) and isinstance(err, TimeoutError)
        # the workers are gone: the next call fails (and does not wait on a hung process: it would hang forever)
        with pytest.raises(WorkerGroupError, match="died"):
            group.ping()
    finally:
        group.shutdown()
        pool.remove()


def test_deadline_scales_with_the_call_batch(local_ray):
    import sc_deadline_workers

    pool, group = build(sc_deadline_workers.HangingWorker, "scale",
                        WorkerDeadlines(startup_s=60, call_s=1, per_sample_s=5))
    try:
        # 6 rows, 3 per rank at 0.5 s each: 1.5 s of work under a 1 + 6 x 5 = 31 s deadline
        assert len(group.sleep_per_row(rows(6, seconds_per_row=0.5))) == 6
        # a call with no batch to scale by gets the 1 s base
        with pytest.raises(WorkerDeadlineError, match=r"after 1 s .*ranks still running: 0, 1 of 2"):
            group.hang_on(0, hang_s=600, others_s=600)
    finally:
        group.shutdown()
        pool.remove()


def test_worker_start_up_has_its_own_deadline(local_ray):
    import ray
    import sc_deadline_workers

    start = time.monotonic()
    with pytest.raises(WorkerDeadlineError) as info:
        build(sc_deadline_workers.SlowInitWorker, "slowinit", WorkerDeadlines(startup_s=3, call_s=1), init_s=600)
    elapsed = time.monotonic() - start
    assert elapsed < 300, f"took {elapsed:.1f} s"  # 3 s, not init's 600: half of that is a generous deadline
    msg = str(info.value)
    assert "stage worker start-up, method __init__" in msg and "ranks still running: 0, 1 of 2" in msg
    assert "trainer.ray_wait_register_center_timeout=3" in msg
    # the pool's resources came back: nothing of the half-built group is left running
    deadline = time.monotonic() + 10
    while ray.available_resources().get("CPU", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == 4


def test_colocated_role_views_use_the_plain_method_for_deadline_and_stage(local_ray):
    import sc_deadline_workers

    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False, max_colocate_count=1, name_prefix="coloc")
    cls = create_colocated_worker_cls({"actor_rollout": RayClassWithInitArgs(sc_deadline_workers.HangingWorker)})
    group = RayWorkerGroup(pool, cls, name_prefix="coloc", deadlines=WorkerDeadlines(startup_s=60, call_s=1.5))
    view = group.spawn(prefix_set=["actor_rollout"])["actor_rollout"]
    try:
        view.init_model(sleep_s=2.5)  # remotely `actor_rollout_init_model`: start-up's 60 s, not a call's 1.5 s
        with pytest.raises(WorkerDeadlineError, match=r"stage hang_on, method hang_on of worker group 'coloc' "
                                                      r"\(roles: actor_rollout\)"):
            view.hang_on(0, hang_s=600)
    finally:
        group.shutdown()
        pool.remove()
