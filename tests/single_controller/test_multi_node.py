"""Two Ray nodes (raylets) on this machine, started with `ray start`: ranks land on both and run a gloo collective
across them; pools the nodes cannot hold are refused at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.utils.ray_utils import init_ray

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_node_cluster(prepared_env):
    """Two raylets started as a user would (`ray start --head`, `ray start --address=...`), 1 CPU each."""
    import ray

    from tests.helpers.ray_cluster import RayStartCluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = RayStartCluster([1, 1], extra_pythonpath=[str(REPO)])
    mp = pytest.MonkeyPatch()
    try:
        # The driver joins the running cluster the way a user would: RAY_ADDRESS.
        mp.setenv("RAY_ADDRESS", cluster.address)
        kwargs = init_ray({"ray_init": {"num_cpus": None}}, run_dir="/tmp/unused_when_joining")
        assert kwargs == {"address": cluster.address}
        yield cluster
    finally:
        ray.shutdown()
        mp.undo()
        cluster.stop()


def test_ranks_span_both_nodes_and_all_gather(two_node_cluster):
    import ray
    import sc_test_workers

    alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    assert len(alive) == 2
    pool = RayResourcePool(process_on_nodes=[1, 1], use_gpu=False, max_colocate_count=1, name_prefix="mn")
    wg = RayWorkerGroup(pool, RayClassWithInitArgs(sc_test_workers.DistWorker), name_prefix="mn")
    try:
        where = wg.where()
        assert [w["rank"] for w in where] == [0, 1]
        assert sorted(w["node_id"] for w in where) == sorted(alive)
        # all_gather of (10 * rank + 1) over gloo, across the two nodes: every rank sees [1, 11].
        assert wg.gather_ranks() == [[1, 11], [1, 11]]
    finally:
        wg.shutdown()
        pool.remove()


def test_pool_needing_more_nodes_fails_clearly(two_node_cluster):
    # 1.5 CPUs in all fits the cluster's 2; three distinct nodes do not fit its two: refused before any waiting.
    pool = RayResourcePool(
        process_on_nodes=[1, 1, 1],
        use_gpu=False,
        max_colocate_count=1,
        name_prefix="three",
        cpus_per_process=0.5,
        placement_timeout_s=60,
    )
    # The message is the pre-check's (a placement timeout words it otherwise), so no waiting happened;
    # no clock is read, as a loaded box could stretch any bound.
    with pytest.raises(RuntimeError, match=r"'three'.*needs 3 distinct Ray nodes.*has 2 alive node"):
        pool.get_placement_groups()


def test_pool_too_big_for_one_node_fails_clearly(two_node_cluster):
    # 2 CPUs in all equal the cluster's total, but each node holds 1: a 2-process node cannot be placed.
    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False, max_colocate_count=1, name_prefix="fat",
                           placement_timeout_s=60)
    with pytest.raises(RuntimeError, match=r"'fat'.*needs 2 CPU on each of 1 node.*short by 1 CPU"):
        pool.get_placement_groups()
