"""One real sandbox service (`python -m verl.tools.sandbox` on a free loopback port) per test module and mode: as
root, and as an unprivileged user (user namespaces), so every test of the service runs in both."""

import pytest

from tests.sandbox.helpers import MODES, make_sandbox, program_uid


@pytest.fixture(scope="module", params=MODES)
def sandbox_mode(request):
    return request.param


@pytest.fixture(scope="module")
def local_sandbox(sandbox_mode):
    sandbox = make_sandbox(sandbox_mode, max_concurrency=4)
    sandbox.start()
    yield sandbox
    sandbox.stop()


@pytest.fixture(scope="module")
def sandbox_url(local_sandbox):
    return local_sandbox.url


@pytest.fixture(scope="module")
def service_pid(local_sandbox):
    return local_sandbox.proc.pid


@pytest.fixture(scope="module")
def programs_uid(sandbox_mode):
    """The host uid of the sandboxed programs (inside, they always see 65534)."""
    return program_uid(sandbox_mode)
