"""Hybrid engine: actor and ref roles in one process per rank, sharing memory."""

from __future__ import annotations

import numpy as np
import psutil
import pytest
import torch

from verl.protocol import DataProto
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayWorkerGroup,
    ResourcePoolManager,
    WorkerGroupError,
    create_colocated_worker_cls,
)
from verl.single_controller.roles import Role


@pytest.fixture(scope="module")
def colocated(local_ray):
    import ray
    import sc_test_workers

    manager = ResourcePoolManager(
        resource_pool_spec={"global_pool": [2]},
        mapping={Role.ActorRollout: "global_pool", Role.RefPolicy: "global_pool"},
    )
    manager.create_resource_pool()
    pool = manager.get_resource_pool(Role.ActorRollout)
    assert manager.get_resource_pool(Role.RefPolicy) is pool
    class_dict = {
        "actor": RayClassWithInitArgs(sc_test_workers.ActorRole, lr=0.5),
        # Upstream style: the class already wrapped by ray.remote.
        "ref": RayClassWithInitArgs(ray.remote(sc_test_workers.RefRole)),
    }
    wg = RayWorkerGroup(pool, create_colocated_worker_cls(class_dict), name_prefix="coloc")
    views = wg.spawn(prefix_set=class_dict.keys())
    yield wg, views
    wg.shutdown()
    pool.remove()


def _ray_processes_named(title: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if cmd.startswith(title):
            found.append(p)
    return found


def test_one_process_per_rank(colocated):
    wg, views = colocated
    assert wg.world_size == 2
    pids = views["actor"].publish("weights")
    ref_pids = [r[0] for r in views["ref"].read("weights")]
    assert pids == ref_pids  # both roles of a rank answer from the same process
    assert len(set(pids)) == 2
    # Counted independently of the group: the OS sees exactly one WorkerDict process per rank.
    procs = _ray_processes_named("ray::WorkerDict_actor_ref")
    assert sorted(p.pid for p in procs) == sorted(pids)


def test_roles_share_memory(colocated):
    _, views = colocated
    views["actor"].publish("w")
    assert [r[1] for r in views["ref"].read("w")] == [[0.0] * 4, [1.0] * 4]
    # An in-place change by the actor role is seen by the ref role: one tensor, no copy.
    views["actor"].bump(0.25)
    assert [r[1] for r in views["ref"].read("w")] == [[0.25] * 4, [1.25] * 4]
    assert [r[2] for r in views["ref"].read("w")] == [0, 1]


def test_role_views_dispatch_data(colocated):
    wg, views = colocated
    data = DataProto.from_dict(
        tensors={"x": torch.arange(5, dtype=torch.float32)}, non_tensors={"uid": np.arange(5).astype(object)}
    )
    assert views["actor"].compute_log_prob(data).batch["old_log_probs"].tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert views["ref"].compute_ref_log_prob(data).batch["ref_log_prob"].tolist() == [-1.0, 0.0, 1.0, 2.0, 3.0]
    # The full group keeps the prefixed names.
    assert wg.ref_compute_ref_log_prob(data).batch["ref_log_prob"].tolist() == [-1.0, 0.0, 1.0, 2.0, 3.0]
    assert not hasattr(views["ref"], "compute_log_prob")


def test_errors_name_the_role(colocated):
    _, views = colocated
    with pytest.raises(KeyError, match="missing") as info:
        views["ref"].read("missing")
    assert "roles: ref" in "\n".join(info.value.__notes__)


def test_spawn_unknown_role(colocated):
    wg, _ = colocated
    with pytest.raises(KeyError, match="critic"):
        wg.spawn(prefix_set=["critic"])


def test_manager_rejects_unknown_pool():
    manager = ResourcePoolManager(resource_pool_spec={"a": [1]}, mapping={Role.Critic: "b"})
    with pytest.raises(KeyError, match="'b'"):
        manager.create_resource_pool()


def test_worker_group_error_type():
    assert issubclass(WorkerGroupError, RuntimeError)
