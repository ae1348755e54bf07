"""init_ray's arguments: defaults, overrides, joining a cluster, temp dir placement. (A real local start is
checked in test_ray_worker_group.py, whose Ray comes from init_ray; joining a cluster in test_multi_node.py.)"""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from verl.utils.ray_utils import build_ray_init_kwargs, ray_temp_dir


@pytest.fixture(autouse=True)
def no_ray_address(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_local_defaults():
    kwargs = build_ray_init_kwargs(None, run_dir="/tmp/r1", num_cpus=3)
    assert kwargs == {
        "object_store_memory": 1 << 30,
        "include_dashboard": False,
        "num_cpus": 3,
        "_temp_dir": "/tmp/r1/ray",
    }


def test_overrides_from_config_win_and_nulls_are_ignored():
    cfg = OmegaConf.create(
        {
            "ray_init": {
                "num_cpus": None,
                "object_store_memory": 123,
                "timeline_json_file": None,
                "include_dashboard": True,
            }
        }
    )
    kwargs = build_ray_init_kwargs(cfg, num_cpus=2)
    assert kwargs == {"object_store_memory": 123, "include_dashboard": True, "num_cpus": 2}


def test_ray_address_env_joins_cluster(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert build_ray_init_kwargs({"ray_init": {"num_cpus": None}}, run_dir="/tmp/r", num_cpus=4) == {
        "address": "10.0.0.1:6379"
    }


def test_config_address_joins_cluster_and_refuses_local_only_keys():
    assert build_ray_init_kwargs({"ray_init": {"address": "auto", "namespace": "x"}}) == {
        "address": "auto",
        "namespace": "x",
    }
    with pytest.raises(ValueError, match=r"\['num_cpus'\].*'auto'"):
        build_ray_init_kwargs({"ray_init": {"address": "auto", "num_cpus": 4}})


def test_long_run_dir_falls_back_to_short_tmp_path():
    long_dir = "/work/main/checkpoints/some_project/a_rather_long_experiment_name"
    tmp = ray_temp_dir(long_dir)
    assert tmp.startswith("/tmp/ray_") and len(tmp) <= 36
    assert tmp == ray_temp_dir(long_dir)  # stable per run
    assert ray_temp_dir("/tmp/run7") == "/tmp/run7/ray"


def test_parallel_put_keeps_order_and_refuses_an_empty_list(local_ray):
    import ray

    from verl.utils.ray_utils import parallel_put

    data = [1, "two", {"three": 3}, [4], *range(5, 25)]
    for workers in (None, 3):
        refs = parallel_put(data, max_workers=workers)
        assert all(isinstance(r, ray.ObjectRef) for r in refs)
        assert ray.get(refs) == data
    with pytest.raises(AssertionError):
        parallel_put([])
