"""Session-wide settings every test process needs before any test starts Ray.

Ray's authentication mode is read into the process's cached Ray config the first time a local Ray enables it, and
is not re-read when the environment changes: a test process that starts one Ray with token authentication (Ray's
default for a new local instance) and a later one with it off (the multi-raylet test clusters) leaves the driver
speaking the wrong mode, and every worker of the second instance dies before it starts. So the whole test session,
and every run it starts as a subprocess, uses one mode: off, as test clusters on this one machine may. Ray's own
default, which verl leaves alone, is checked in a fresh interpreter with this variable removed
(tests/single_controller/test_ray_local_security.py).
"""

from __future__ import annotations

import os
import sys

import pytest

os.environ["RAY_AUTH_MODE"] = "disabled"


# what a Worker built in the test process writes (verl.single_controller.base.worker._configure_threads); a Ray
# cluster started later in the same process would hand it to its workers, whose thread share then depends on which
# tests ran before (with pytest-xdist, on how the tests were split)
_THREAD_ENV = ("VERL_TORCH_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


@pytest.fixture(autouse=True)
def _restore_thread_settings():
    saved = {name: os.environ.get(name) for name in _THREAD_ENV}
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``gpu`` skip, with the reason, where verl would not compute on CUDA (no GPU visible, or
    VERL_DEVICE=cpu): the default run on a CPU box reports them skipped, never failed or errored."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import pytest

    from verl.utils.device import is_cuda_available

    if is_cuda_available():
        return
    skip = pytest.mark.skip(reason="gpu test: no CUDA device visible to torch (or VERL_DEVICE=cpu); "
                                   "run `pytest -m gpu` on a machine with a GPU")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture
def mcp_manager(monkeypatch):
    """A fresh MCP client manager (the process-wide ``ClientManager`` would keep servers between tests), closed
    after the test."""
    from verl.utils.mcp import client_manager

    fresh = client_manager.MCPClientManager()
    monkeypatch.setattr(client_manager, "ClientManager", fresh)
    yield fresh
    fresh.close()
