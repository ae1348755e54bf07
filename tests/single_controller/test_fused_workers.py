"""Upstream's fused workers: a subclass of create_colocated_worker_raw_cls adds methods that use several roles;
RayWorkerGroup.fuse(roles) exposes each role's methods as wg.<role>.<method>."""

from __future__ import annotations

import pytest

from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.single_controller.ray.base import create_colocated_worker_raw_cls


def test_the_raw_class_is_a_plain_worker_class_with_prefixed_forwarders(prepared_env):
    import sc_fused_workers as w

    raw = create_colocated_worker_raw_cls(w.CLASS_DICT)
    assert not hasattr(raw, "__ray_metadata__")
    assert {"actor_add", "actor_pid", "critic_sub", "critic_pid"} <= set(dir(raw))
    assert raw.colocated_roles == ["actor", "critic"]
    with pytest.raises(ValueError, match="at least one role"):
        create_colocated_worker_raw_cls({})


def test_fused_group_calls_roles_directly_and_inside_one_method(local_ray):
    import sc_fused_workers as w

    pool = RayResourcePool(process_on_nodes=[2], use_gpu=False)
    cls = RayClassWithInitArgs(cls=w.HybridWorker)
    cls.fused_worker_used = True
    wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=cls)
    try:
        wg.fuse(w.CLASS_DICT.keys())
        added = wg.actor.add(0.5)
        assert added == [0.5, 1.5]  # rank 0 and rank 1
        assert wg.critic.sub(added) == [-9.5, -8.5]
        assert wg.add_then_sub(0.5) == [-9.5, -8.5]
        assert wg.actor.pid() == wg.critic.pid()  # both roles of a rank live in one process
        with pytest.raises(ValueError, match="already has an attribute"):
            wg.fuse(["actor"])
    finally:
        wg.shutdown()
        pool.remove()
