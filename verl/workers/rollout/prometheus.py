"""`actor_rollout_ref.rollout.prometheus`: the vLLM rollout engines' metrics, for a Prometheus server.

Upstream runs each vLLM engine behind its own HTTP server, whose ``/metrics`` route Prometheus scrapes, and writes a
Prometheus configuration (``prometheus.file``) listing those servers, then asks the Prometheus server on
``prometheus.port`` to reload it. Here the engines run inside the trainer's workers (in process, no HTTP server of
their own), and vLLM records its metrics (``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, the
request, queue and KV-cache gauges, the latency histograms) into prometheus_client's registry of that process when
``disable_log_stats=false``. So:

- each worker holding a vLLM engine serves that registry in Prometheus' text format at
  ``http://<node address>:<free port>/metrics`` (``MetricsEndpoint``; the node address is Ray's, loopback for a
  local Ray instance);
- the trainer collects the endpoints and writes ``prometheus.file`` (``write_prometheus_config``): a Prometheus
  configuration with one ``rollout`` scrape job over them, then ``POST http://<node address>:<port>/-/reload``;
  the reload is best effort (a Prometheus server may not be running), as upstream, and its outcome is logged;
- ``served_model_name`` (its last path part, as upstream) becomes the engine's served name, the ``model_name``
  label of every vllm metric.
"""

from __future__ import annotations

import logging
import os
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import yaml

from verl.workers.config.rollout_services import PrometheusConfig

logger = logging.getLogger(__name__)

__all__ = ["MetricsEndpoint", "node_address", "prometheus_scrape_config", "served_model_name",
           "write_prometheus_config"]

SCRAPE_JOB = "rollout"


def served_model_name(config: PrometheusConfig) -> str | None:
    """The engine's served name for ``config`` (upstream keeps the last part of a path), or None: vLLM's default."""
    name = config.served_model_name
    if not config.enable or not name:
        return None
    return name.rstrip("/").split("/")[-1]


def node_address() -> str:
    """This node's address as Ray advertises it (loopback for a local instance), or loopback outside Ray."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:
        pass
    return "127.0.0.1"


class MetricsEndpoint:
    """``GET /metrics``: prometheus_client's registry of this process (``registry``; the default one vLLM records
    into) in Prometheus' text format, on a thread of its own; other paths answer 404."""

    def __init__(self, registry: Any = None) -> None:
        import prometheus_client

        self.registry = registry if registry is not None else prometheus_client.REGISTRY
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (0: a free port); returns ``host:port``, the scrape target."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # one line per scrape would flood the worker's log
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404, "only /metrics is served")
                    return
                body = generate_latest(registry)
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="vllm-metrics", daemon=True)
        self._thread.start()
        return self.address

    @property
    def address(self) -> str:
        if self._server is None:
            raise RuntimeError("the metrics endpoint is not started")
        host, port = self._server.server_address[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def prometheus_scrape_config(targets: list[str]) -> dict[str, Any]:
    """A Prometheus configuration scraping ``targets`` (``host:port``, path /metrics) as the ``rollout`` job."""
    return {
        "global": {"scrape_interval": "10s", "evaluation_interval": "10s"},
        "scrape_configs": [{"job_name": SCRAPE_JOB, "static_configs": [{"targets": list(targets)}]}],
    }


def write_prometheus_config(config: PrometheusConfig, targets: list[str], rollout_name: str,
                            reload_timeout_s: float = 5.0) -> bool:
    """Write ``config.file`` for ``targets`` and ask the Prometheus server on ``config.port`` of this node to reload
    it. Returns whether the reload was accepted (False: no server answered; the file is written either way)."""
    if not targets:
        raise ValueError("actor_rollout_ref.rollout.prometheus.enable=true, but no rollout worker serves metrics")
    folder = os.path.dirname(config.file)
    if folder:
        os.makedirs(folder, exist_ok=True)
    with open(config.file, "w") as f:
        yaml.safe_dump(prometheus_scrape_config(targets), f, default_flow_style=False, sort_keys=False)
    url = f"http://{node_address()}:{config.port}/-/reload"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="POST"), timeout=reload_timeout_s) as reply:
            accepted = 200 <= reply.status < 300
    except (urllib.error.URLError, OSError) as err:
        logger.warning("Prometheus configuration for %d %s engine(s) written to %s; no Prometheus server reloaded "
                       "it at %s (%s): start one with --config.file=%s --web.enable-lifecycle", len(targets),
                       rollout_name, config.file, url, err, config.file)
        return False
    logger.info("Prometheus configuration for %d %s engine(s) written to %s and reloaded at %s", len(targets),
                rollout_name, config.file, url)
    return accepted
