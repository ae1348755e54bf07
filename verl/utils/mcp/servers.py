"""The MCP servers file an MCP tool entry points at (``mcp.mcp_servers_config_path``), read and checked.

The file is the JSON that MCP clients share (upstream verl reads the same shape)::

    {"mcpServers": {
        "search": {"url": "http://127.0.0.1:8000/sse", "auth_token": "..."},
        "math":   {"command": "python3", "args": ["math_server.py"], "env": {"K": "V"}, "cwd": "/srv"}}}

A server is either a local process spoken to over stdin/stdout (``command``, with optional ``args``, ``env``,
``cwd``) or a URL. A URL server speaks SSE when ``transport`` says ``sse``, when the URL's path ends in ``/sse``, or
when it has an ``auth_token`` and no ``transport`` (upstream sends token servers over SSE); otherwise streamable
HTTP. ``auth_token`` becomes an ``Authorization: Bearer`` header; ``headers`` adds others.

Nothing here imports the MCP SDK, so the check before Ray can read a file without it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MCPServerSpec", "ROOT_KEY", "load_mcp_servers"]

ROOT_KEY = "mcpServers"
_STDIO_KEYS = {"command", "args", "env", "cwd"}
_URL_KEYS = {"url", "auth_token", "headers", "transport"}
_TRANSPORTS = ("sse", "streamable-http", "http")


@dataclass(frozen=True)
class MCPServerSpec:
    """One entry of ``mcpServers``; ``transport`` is ``stdio``, ``sse`` or ``streamable-http``."""

    name: str
    transport: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = field(default=())

    def describe(self) -> str:
        if self.transport == "stdio":
            return " ".join((self.command or "", *self.args)).strip()
        return f"{self.url} ({self.transport})"


def _transport_for_url(url: str, entry: dict[str, Any]) -> str:
    transport = entry.get("transport")
    if transport is not None:
        return "streamable-http" if transport == "http" else transport
    path = url.split("?", 1)[0].rstrip("/")
    if path.endswith("/sse") or "auth_token" in entry:
        return "sse"
    return "streamable-http"


def _server(name: str, entry: Any, where: str) -> MCPServerSpec:
    where = f"{where}: mcpServers.{name}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} must be a mapping with `command` (a local server) or `url`; got {entry!r}")
    has_command, has_url = bool(entry.get("command")), bool(entry.get("url"))
    if has_command == has_url:
        raise ValueError(f"{where} needs exactly one of `command` (a server started here, spoken to over stdin/stdout)"
                         f" or `url` (a running server); it has {'both' if has_command else 'neither'}")
    allowed = _STDIO_KEYS if has_command else _URL_KEYS
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown} for a {'command' if has_command else 'url'} server; "
                         f"allowed: {sorted(allowed)}")
    if has_command:
        args = entry.get("args") or []
        env = entry.get("env") or {}
        if not isinstance(args, list) or not isinstance(env, dict):
            raise ValueError(f"{where}: `args` must be a list and `env` a mapping")
        return MCPServerSpec(name, "stdio", command=str(entry["command"]), args=tuple(str(a) for a in args),
                             env=tuple(sorted((str(k), str(v)) for k, v in env.items())),
                             cwd=None if entry.get("cwd") is None else str(entry["cwd"]))
    transport = entry.get("transport")
    if transport is not None and transport not in _TRANSPORTS:
        raise ValueError(f"{where}.transport must be one of {list(_TRANSPORTS)}; got {transport!r}")
    headers = dict(entry.get("headers") or {})
    if entry.get("auth_token"):
        headers["Authorization"] = f"Bearer {entry['auth_token']}"
    url = str(entry["url"])
    return MCPServerSpec(name, _transport_for_url(url, entry), url=url,
                         headers=tuple(sorted((str(k), str(v)) for k, v in headers.items())))


def load_mcp_servers(path: str, where: str = "mcp.mcp_servers_config_path") -> list[MCPServerSpec]:
    """The servers of the file at ``path``, in file order. Errors start with ``where`` and name the file."""
    if not path:
        raise ValueError(f"{where} is not set: an MCP tool entry needs `mcp: {{mcp_servers_config_path: "
                         f"servers.json}}`, the JSON file naming its servers under `{ROOT_KEY}`")
    full = os.path.expanduser(str(path))
    try:
        with open(full, encoding="utf-8") as f:
            loaded = json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{where}: MCP servers file not found: {path!r} (relative paths are read from the "
                         f"directory the run starts in, {os.getcwd()!r})") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{where}: {path!r} is not a JSON MCP servers file: {exc}") from None
    servers = loaded.get(ROOT_KEY) if isinstance(loaded, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise ValueError(f"{where}: {path!r} has no `{ROOT_KEY}` mapping of servers "
                         f"(expected {{\"{ROOT_KEY}\": {{\"name\": {{\"command\": ...}} or {{\"url\": ...}}}}}})")
    extra = sorted(set(loaded) - {ROOT_KEY})
    if extra:
        raise ValueError(f"{where}: {path!r} has top-level key(s) {extra} besides `{ROOT_KEY}`, which nothing reads")
    return [_server(str(name), entry, f"{where} ({path})") for name, entry in servers.items()]
