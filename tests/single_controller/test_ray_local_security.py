"""A local start through init_ray is reachable from this machine only, and keeps Ray's own authentication.

Runs in a fresh interpreter with the environment a user has by default (no RAY_AUTH_MODE, no RAY_ADDRESS), so no
setting of this test session leaks in.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

from tests.helpers.e2e import REPO

_PROBE = textwrap.dedent("""
    import json, os, socket, sys
    from verl.utils.ray_utils import init_ray
    import ray

    init_ray({"ray_init": {"object_store_memory": 100 * 2**20, "log_to_driver": False}},
             run_dir=sys.argv[1], num_cpus=1)

    @ray.remote
    def pid():
        return os.getpid()

    ray.get(pid.remote(), timeout=60)  # a worker started and answered
    host, port = ray.get_runtime_context().gcs_address.rsplit(":", 1)
    print(json.dumps({"host": host, "port": int(port), "auth": os.environ.get("RAY_AUTH_MODE"),
                      "cluster_switch": os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"),
                      "routable": ray._private.services.node_ip_address_from_perspective()}), flush=True)
    sys.stdin.readline()  # the test probes the port while Ray still runs
    ray.shutdown()
""")


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


def test_a_local_start_listens_on_loopback_only_with_ray_authentication_left_on(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.Popen([sys.executable, "-c", _PROBE, str(tmp_path)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        line = proc.stdout.readline()
        assert line, "the probe exited before Ray started"
        info = json.loads(line)
        assert info["host"] == "127.0.0.1"
        assert _reachable("127.0.0.1", info["port"])
        routable = info["routable"]
        if routable and not routable.startswith("127."):
            assert not _reachable(routable, info["port"]), f"the GCS answers on {routable}, not only on loopback"
        assert info["auth"] != "disabled"  # verl leaves Ray's default (token mode) alone
        assert info["cluster_switch"] is None  # restored once Ray is up: a later `ray start --address` still joins
    finally:
        proc.communicate(input="\n", timeout=60)
    assert proc.returncode == 0
