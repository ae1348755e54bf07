"""One real sandbox service (`python -m verl.tools.sandbox` on a free loopback port) per test module."""

import os
import shutil

import pytest

from verl.sandbox.local import LocalSandbox

needs_isolation = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="the sandbox needs root and util-linux unshare to build its namespaces",
)


@pytest.fixture(scope="module")
def sandbox_url():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("the sandbox needs root and util-linux unshare to build its namespaces")
    with LocalSandbox(max_concurrency=4) as url:
        yield url
