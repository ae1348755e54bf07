"""Local Ray for the single-controller tests.

Worker classes live in sc_test_workers.py; its folder goes on PYTHONPATH before Ray starts so the worker
processes (which inherit the environment) can import it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from types import SimpleNamespace

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _prepare_env() -> None:
    # Test clusters of raylets on this one machine turn Ray's token authentication off explicitly (verl leaves
    # Ray's default alone: tests/single_controller/test_ray_local_security.py).
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # a thread share a Worker built earlier in this test process wrote would reach the cluster's workers
    for name in ("VERL_TORCH_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.pop(name, None)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if HERE not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([HERE, *[p for p in paths if p]])


@pytest.fixture(scope="module")
def local_ray():
    """A fresh local Ray (4 logical CPUs, 500 MB object store) started through verl's own init_ray."""
    import ray

    from verl.utils.ray_utils import init_ray

    _prepare_env()
    if ray.is_initialized():
        ray.shutdown()
    run_dir = tempfile.mkdtemp(prefix="vsc", dir="/tmp")
    kwargs = init_ray(
        {"ray_init": {"object_store_memory": 500 * 1024**2, "log_to_driver": False}}, run_dir=run_dir, num_cpus=4
    )
    yield SimpleNamespace(run_dir=run_dir, init_kwargs=kwargs)
    ray.shutdown()
    shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def prepared_env():
    _prepare_env()
