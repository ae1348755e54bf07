"""The JSON reply every loopback HTTP service here sends (the judge and reward-model servers, the sandbox)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

__all__ = ["json_reply", "read_json"]


def json_reply(handler: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    """Send ``payload`` as a JSON body with ``status`` (keep-alive safe: Content-Length is always set)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def read_json(handler: BaseHTTPRequestHandler) -> Any:
    """The request body decoded as JSON (None when empty); ValueError when it is not JSON."""
    length = int(handler.headers.get("Content-Length") or 0)
    return json.loads(handler.rfile.read(length) or b"null")
