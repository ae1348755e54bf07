"""A real multi-node Ray cluster on this one machine, started the way a user starts one: `ray start --head`, then
`ray start --address=<head>` once per extra node, each raylet with its own CPU count.

Every `ray start` runs in its own process session, so the cluster is stopped by killing exactly the processes those
sessions hold (never `ray stop`, which would stop every Ray instance on the machine, other tests' included). Every
port is picked free, so clusters of concurrent test runs do not collide (Ray's fixed defaults such as 8265 and
10001 would). Token authentication is off, explicitly, as for the other test clusters (tests/single_controller/
conftest.py); a real cluster keeps Ray's default (docs/reliability.md, "Security defaults").
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY_BIN = Path(sys.executable).with_name("ray")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes whose session id is `sid`."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            members.append(int(entry))
    return members


def cluster_env(extra_pythonpath: list[str] | None = None) -> dict[str, str]:
    """The environment the raylets (and so every worker they start) and the driver share."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")}
    paths = [*(extra_pythonpath or []), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=os.pathsep.join(paths))
    return env


class RayStartCluster:
    """`RayStartCluster([2, 1])`: a head node with 2 CPUs and a second node with 1. `.address` is what a driver
    joins (RAY_ADDRESS); `.stop()` kills every process the `ray start` commands left behind."""

    def __init__(self, cpus_per_node: list[int], extra_pythonpath: list[str] | None = None,
                 object_store_bytes: int = 150 * 1024**2, job_server: bool = False) -> None:
        """job_server: start the head's dashboard (Ray's job server) on loopback, at `.dashboard_url`, for
        `ray job submit`."""
        self.env = cluster_env(extra_pythonpath)
        self.temp_dir = tempfile.mkdtemp(prefix="vrc", dir="/tmp")  # short: Ray's unix socket paths are bounded
        self.sids: list[int] = []
        from ray._private.services import get_node_ip_address

        # the head advertises the machine's IP; joining it through another name (127.0.0.1) makes Ray look for a
        # raylet on that name and fail
        port = free_port()
        self.address = f"{get_node_ip_address()}:{port}"
        try:
            dashboard_port = free_port()
            self.dashboard_url = f"http://127.0.0.1:{dashboard_port}" if job_server else None
            self._start(["--head", f"--port={port}", f"--temp-dir={self.temp_dir}",
                         f"--include-dashboard={'true' if job_server else 'false'}", "--dashboard-host=127.0.0.1",
                         f"--dashboard-port={dashboard_port}", f"--ray-client-server-port={free_port()}"],
                        cpus_per_node[0], object_store_bytes)
            for cpus in cpus_per_node[1:]:
                self._start([f"--address={self.address}"], cpus, object_store_bytes)
        except BaseException:
            self.stop()
            raise

    def _start(self, args: list[str], cpus: int, object_store_bytes: int) -> None:
        ports = [f"--node-manager-port={free_port()}", f"--object-manager-port={free_port()}",
                 f"--dashboard-agent-listen-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}",
                 f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}"]
        cmd = [str(RAY_BIN), "start", *args, f"--num-cpus={cpus}", "--num-gpus=0",
               f"--object-store-memory={object_store_bytes}", "--disable-usage-stats", *ports]
        proc = subprocess.Popen(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.sids.append(proc.pid)
        out, _ = proc.communicate(timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{out.decode(errors='replace')}")

    def stop(self) -> None:
        for sid in self.sids:
            for _ in range(100):
                members = session_members(sid)
                if not members:
                    break
                for pid in members:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.1)
        self.sids = []
        subprocess.run(["rm", "-rf", self.temp_dir], check=False)
