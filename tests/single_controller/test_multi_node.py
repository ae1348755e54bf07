"""Two simulated Ray nodes on this machine: ranks land on both and run a gloo collective across them."""

from __future__ import annotations

import pytest

from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.utils.ray_utils import init_ray

NODE_ARGS = {"num_cpus": 1, "object_store_memory": 100 * 1024**2, "include_dashboard": False}


@pytest.fixture(scope="module")
def two_node_cluster(prepared_env):
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args=NODE_ARGS)
    cluster.add_node(**NODE_ARGS)
    cluster.wait_for_nodes()
    mp = pytest.MonkeyPatch()
    # The driver joins the running cluster the way a user would: RAY_ADDRESS.
    mp.setenv("RAY_ADDRESS", cluster.address)
    kwargs = init_ray({"ray_init": {"num_cpus": None}}, run_dir="/tmp/unused_when_joining")
    assert kwargs == {"address": cluster.address}
    yield cluster
    ray.shutdown()
    mp.undo()
    cluster.shutdown()


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
    pool = RayResourcePool(
        process_on_nodes=[1, 1, 1],
        use_gpu=False,
        max_colocate_count=1,
        name_prefix="three",
        cpus_per_process=0.5,
        placement_timeout_s=3,
    )
    with pytest.raises(RuntimeError, match="could not be placed within 3 s"):
        pool.get_placement_groups()
