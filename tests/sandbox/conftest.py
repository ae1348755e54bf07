"""One real sandbox service (`python -m verl.tools.sandbox` on a free loopback port) per test module."""

import os
import shutil

import pytest

from verl.sandbox.local import LocalSandbox


@pytest.fixture(scope="module")
def local_sandbox():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the sandbox needs root and util-linux unshare to build its namespaces")
    sandbox = LocalSandbox(max_concurrency=4)
    sandbox.start()
    yield sandbox
    sandbox.stop()


@pytest.fixture(scope="module")
def sandbox_url(local_sandbox):
    return local_sandbox.url


@pytest.fixture(scope="module")
def service_pid(local_sandbox):
    return local_sandbox.proc.pid
