"""Starting (or joining) Ray the way every verl entry point needs it.

A local start gets a bounded object store, no dashboard, servers bound to loopback only (nothing on the network can
reach the instance: Ray runs whatever code a client sends it), Ray's own default authentication (token mode since
Ray 2.5x; RAY_AUTH_MODE=disabled is the user's explicit choice, never ours), and its temp dir (logs, sockets) under
the run's output folder so a run's Ray logs sit next to its checkpoints. Setting RAY_ADDRESS (or
`ray_kwargs.ray_init.address`) joins an existing cluster instead; then the cluster's own settings apply.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import os
from collections.abc import Iterator
from typing import Any, Mapping

DEFAULT_OBJECT_STORE_BYTES = 1 << 30
# Ray puts unix sockets at <temp_dir>/session_<date>_<time>_<usec>_<pid>/sockets/<name>; AF_UNIX paths stop at
# 107 bytes, and the part after temp_dir takes up to ~70 of them.
MAX_TEMP_DIR_CHARS = 36
# `ray_kwargs.ray_init` keys that configure verl, not ray.init.
_NOT_RAY_INIT_KEYS = ("timeline_json_file",)
# Only meaningful when this process starts the Ray instance.
_LOCAL_START_KEYS = (
    "num_cpus",
    "num_gpus",
    "resources",
    "labels",
    "object_store_memory",
    "_temp_dir",
    "_system_config",
)


def _to_plain_dict(value: Any) -> dict:
    if value is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(value, DictConfig):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:
        pass
    if not isinstance(value, Mapping):
        raise TypeError(f"ray_kwargs must be a mapping like {{'ray_init': {{...}}}}, got {type(value).__name__}")
    return dict(value)


def ray_temp_dir(run_dir: str) -> str:
    """`<run_dir>/ray` when short enough for Ray's socket paths, else a stable /tmp/ray_<hash> for this run."""
    wanted = os.path.join(os.path.abspath(run_dir), "ray")
    if len(wanted) <= MAX_TEMP_DIR_CHARS:
        return wanted
    return f"/tmp/ray_{hashlib.sha1(wanted.encode()).hexdigest()[:10]}"


def build_ray_init_kwargs(
    ray_kwargs: Mapping | None = None, run_dir: str | None = None, num_cpus: int | None = None
) -> dict[str, Any]:
    """The keyword arguments `init_ray` passes to `ray.init` (separate so it can be checked without Ray)."""
    overrides = _to_plain_dict(_to_plain_dict(ray_kwargs).get("ray_init"))
    overrides = {k: v for k, v in overrides.items() if v is not None and k not in _NOT_RAY_INIT_KEYS}
    address = overrides.get("address") or os.environ.get("RAY_ADDRESS")
    if address and address != "local":
        dropped = sorted(k for k in _LOCAL_START_KEYS if k in overrides)
        if dropped:
            raise ValueError(
                f"ray_kwargs.ray_init sets {dropped} but also joins the existing cluster at {address!r} "
                "(ray_kwargs.ray_init.address or RAY_ADDRESS); those only apply when starting Ray locally. "
                "Remove them, or unset the address."
            )
        return {**overrides, "address": address}
    kwargs: dict[str, Any] = {
        "object_store_memory": DEFAULT_OBJECT_STORE_BYTES,
        "include_dashboard": False,
    }
    if num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    if run_dir is not None:
        kwargs["_temp_dir"] = ray_temp_dir(run_dir)
    kwargs.update(overrides)
    return kwargs


def init_ray(
    ray_kwargs: Mapping | None = None, run_dir: str | None = None, num_cpus: int | None = None
) -> dict[str, Any] | None:
    """Start or join Ray once; a no-op (returns None) when this process is already connected.

    Args:
        ray_kwargs: the trainer's `ray_kwargs` config; `ray_init` entries override the defaults below.
        run_dir: the run's output folder; Ray's temp dir goes to `<run_dir>/ray` (or /tmp/ray_<hash> if that path
            is too long for Ray's unix sockets).
        num_cpus: logical CPUs to declare when starting locally (None: Ray counts the machine's).

    Returns the kwargs given to ray.init.
    """
    import ray

    if ray.is_initialized():
        return None
    kwargs = build_ray_init_kwargs(ray_kwargs, run_dir=run_dir, num_cpus=num_cpus)
    local_start = "address" not in kwargs
    loopback = local_start and "_node_ip_address" not in kwargs
    if local_start:
        # Ray starts its workers at nice 15, fit for background tasks beside a busy driver. Here the workers are the
        # training itself: at 15 anything else on the machine starves them (steps 3-6x slower beside one other job).
        # The local raylet and its workers inherit this; RAY_worker_niceness=15 restores Ray's default.
        os.environ.setdefault("RAY_worker_niceness", "0")
    if "_temp_dir" in kwargs:
        os.makedirs(kwargs["_temp_dir"], exist_ok=True)
    if loopback:
        with _loopback_node_ip():
            ray.init(**kwargs)
        _warn_unless_loopback(ray.get_runtime_context().gcs_address)
    else:
        ray.init(**kwargs)
    return kwargs


@contextlib.contextmanager
def _loopback_node_ip() -> Iterator[None]:
    """While Ray starts: make the instance advertise, and so bind every server to, the loopback address.

    ray.init turns an explicit `_node_ip_address="127.0.0.1"` into the machine's routable IP, and its servers then
    listen on every interface. Ray's own switch for a local-only instance is RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0
    (the default on macOS/Windows): the node IP becomes loopback, and the GCS, raylet, object manager and worker
    servers bind to it. Ray reads it once at import, so an already-imported Ray gets the value set directly. Both are
    restored afterwards: left set, a later `ray start --address=...` from this environment would refuse to join.
    """
    from ray._private import ray_constants

    name = ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
    env_before, constant_before = os.environ.get(name), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[name] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = constant_before
        if env_before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = env_before


def _warn_unless_loopback(gcs_address: str) -> None:
    host = gcs_address.rsplit(":", 1)[0].strip("[]")
    if host not in ("127.0.0.1", "::1", "localhost"):
        import warnings

        warnings.warn(f"the local Ray instance advertises {gcs_address}, not loopback: its servers may be reachable "
                      "from the network. Check that nothing else sets Ray's node IP (RAY_NODE_IP_ADDRESS, "
                      "ray_kwargs.ray_init._node_ip_address), or firewall the machine.",
                      RuntimeWarning, stacklevel=3)


def parallel_put(data_list: list[Any], max_workers: int | None = None) -> list[Any]:
    """``ray.put`` every item from a thread pool (``max_workers``, default min(len, 16)); the refs come back in the
    order of `data_list`. An empty list is an AssertionError, as upstream."""
    import ray

    assert len(data_list) > 0, "parallel_put needs at least one object to put"
    workers = max_workers if max_workers is not None else min(len(data_list), 16)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(ray.put, data_list))
