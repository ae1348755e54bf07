"""Several reward-model replicas behind one address: upstream's reward router
(``verl.experimental.reward_loop.router.naive_router``), the ``reward_router_address`` the reward functions get.

``RewardRouter(replica_addresses)`` listens on a loopback port (the node's address when the cluster has several
nodes) and answers every route the replicas answer (``POST /v1/chat/completions``, ``POST /classify``,
``GET /v1/models``, ...) by passing the request on, unchanged, to one replica and its answer back, status included.
It answers ``GET /health`` and ``GET /metrics`` itself.

- **Which replica.** The one with the fewest requests in flight (upstream's choice: least outstanding requests);
  among equals, the one that has been sent the fewest so far, so requests that come one at a time still take turns.
- **A replica that is down.** A replica that refuses the connection, drops it before answering, or answers 503
  (its engine stopped) is marked down for the rest of the run and the request goes to another; upstream retries
  the same worker instead, which cannot help a dead one. When no replica is left, the request is answered 503
  with ``RewardRouterError``'s message, naming every replica and why it is down. ``/health`` is 503 then too.
- **A replica that hangs.** Each pass-on waits at most ``forward_timeout_s`` for the answer; past it the request is
  answered 504 naming the replica (the judge's generation is not retried on another: it would wait as long
  again). The callers have their own deadlines (``reward_model.timeout``, the judge client's ``request_timeout``).

``/metrics`` (JSON): per replica its address, requests sent, answered, failed, in flight and whether it is down;
and the router's totals (``requests``, ``completed``, ``failed``, ``rerouted``).
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from verl.utils.json_http import json_reply

__all__ = ["RewardRouter", "RewardRouterError"]

_HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "host", "content-length", "proxy-connection"}


class RewardRouterError(RuntimeError):
    """No replica could answer (HTTP ``status``: 503 all down, 504 one did not answer in time)."""

    def __init__(self, message: str, status: int = 503) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Replica:
    address: str
    in_flight: int = 0
    sent: int = 0
    completed: int = 0
    failed: int = 0
    down: str | None = None  # why it is no longer used

    def view(self) -> dict[str, Any]:
        return {"address": self.address, "requests": self.sent, "completed": self.completed, "failed": self.failed,
                "in_flight": self.in_flight, "down": self.down}


class RewardRouter:
    """``replica_addresses``: each replica's ``host:port``; ``forward_timeout_s``: how long one pass-on may wait."""

    def __init__(self, replica_addresses: list[str], forward_timeout_s: float = 3600.0) -> None:
        if not replica_addresses:
            raise ValueError("the reward router needs at least one replica address")
        self.replicas = [_Replica(str(a)) for a in replica_addresses]
        self.forward_timeout_s = float(forward_timeout_s)
        self.counters = {"requests": 0, "completed": 0, "failed": 0, "rerouted": 0}
        self._lock = threading.Lock()
        self._http: ThreadingHTTPServer | None = None

    # -- life cycle ----------------------------------------------------------------------------------------------

    def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        router = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return None

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                router._handle(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                router._handle(self, "POST")

        self._http = ThreadingHTTPServer((host, port), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, name="reward-router", daemon=True).start()
        return self.address()

    def address(self) -> str:
        if self._http is None:
            raise RuntimeError("the reward router is not started")
        host, port = self._http.server_address[:2]
        return f"{host}:{port}"

    def stop(self) -> dict[str, Any]:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
        return self.stats()

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self.counters, "replicas": [r.view() for r in self.replicas]}

    def mark_down(self, address: str, reason: str) -> None:
        """Stop sending to the replica at ``address`` (its manager saw it die)."""
        with self._lock:
            for replica in self.replicas:
                if replica.address == address and replica.down is None:
                    replica.down = reason

    # -- routing -------------------------------------------------------------------------------------------------

    def _pick(self, tried: set[int]) -> int | None:
        with self._lock:
            free = [i for i, r in enumerate(self.replicas) if r.down is None and i not in tried]
            if not free:
                return None
            best = min(free, key=lambda i: (self.replicas[i].in_flight, self.replicas[i].sent, i))
            self.replicas[best].in_flight += 1
            self.replicas[best].sent += 1
            return best

    def _settle(self, index: int, ok: bool, down: str | None = None) -> None:
        with self._lock:
            replica = self.replicas[index]
            replica.in_flight -= 1
            if ok:
                replica.completed += 1
            else:
                replica.failed += 1
            if down is not None and replica.down is None:
                replica.down = down

    def forward(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, str]:
        """Pass one request on; returns the answering replica's ``(status, body, content type)``."""
        with self._lock:
            self.counters["requests"] += 1
        tried: set[int] = set()
        while True:
            index = self._pick(tried)
            if index is None:
                with self._lock:
                    self.counters["failed"] += 1
                    why = "; ".join(f"{r.address}: {r.down or 'failed for this request'}" for r in self.replicas)
                raise RewardRouterError(f"RewardRouterError: none of the {len(self.replicas)} reward-model replicas "
                                        f"can answer {method} {path} ({why})")
            if tried:
                with self._lock:
                    self.counters["rerouted"] += 1
            tried.add(index)
            address = self.replicas[index].address
            try:
                status, data, kind = self._send(address, method, path, body, headers)
            except TimeoutError:
                self._settle(index, ok=False)
                with self._lock:
                    self.counters["failed"] += 1
                raise RewardRouterError(f"RewardRouterError: the reward-model replica at {address} did not answer "
                                        f"{method} {path} within {self.forward_timeout_s:g} s", status=504) from None
            except (OSError, http.client.HTTPException) as err:  # refused, reset, closed before answering
                self._settle(index, ok=False, down=f"unreachable ({type(err).__name__}: {err})")
                continue
            if status == 503:  # its engine is not running: another replica may be
                self._settle(index, ok=False, down=f"answered 503: {data[:200].decode('utf-8', 'replace')}")
                continue
            self._settle(index, ok=status < 500)
            with self._lock:
                self.counters["completed" if status < 500 else "failed"] += 1
            return status, data, kind

    def _send(self, address: str, method: str, path: str, body: bytes,
              headers: dict[str, str]) -> tuple[int, bytes, str]:
        host, port = address.rsplit(":", 1)
        connection = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=self.forward_timeout_s)
        try:
            sent = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS}
            connection.request(method, path, body=body if method == "POST" else None, headers=sent)
            reply = connection.getresponse()
            return reply.status, reply.read(), reply.getheader("Content-Type") or "application/json"
        finally:
            connection.close()

    # -- HTTP ----------------------------------------------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        route = handler.path.split("?")[0].rstrip("/")
        if method == "GET" and route in ("/health", ""):
            stats = self.stats()
            up = [r["address"] for r in stats["replicas"] if r["down"] is None]
            json_reply(handler, 200 if up else 503, {"status": "ok" if up else "no replica is up",
                                                     "replicas": {r["address"]: r["down"] or "ok"
                                                                  for r in stats["replicas"]}})
            return
        if method == "GET" and route == "/metrics":
            json_reply(handler, 200, self.stats())
            return
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        try:
            status, data, kind = self.forward(method, handler.path, body, dict(handler.headers.items()))
        except RewardRouterError as err:
            json_reply(handler, err.status, {"error": {"message": str(err), "type": "RewardRouterError"}})
            return
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
