"""MCPClientManager: the connections to the MCP servers that MCP tools call (upstream verl's ``ClientManager``).

One manager per process (``ClientManager``). It runs its own event loop on a daemon thread and keeps one session
open per server, so a stdio server is started once, not once per call, and tools may be called from any event loop
(the agent loop's) or from plain code (the tool registry). A session that breaks (the server exited, the network
dropped) is opened again on the next call.

Each server has a token bucket of ``rate_limit`` calls per second (the tool entry's ``config.rate_limit``, upstream's
key, default 10); a call waits for a token instead of failing.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from typing import Any

from verl.utils.mcp.servers import ROOT_KEY, MCPServerSpec, load_mcp_servers

__all__ = ["ClientManager", "MCPClientManager", "TokenBucket", "mcp2openai", "require_mcp_sdk"]

logger = logging.getLogger(__name__)

DEFAULT_RATE_LIMIT = 10.0


def require_mcp_sdk(where: str) -> None:
    """Refuse, naming ``where``, when the MCP SDK is not installed."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        raise ImportError(f"{where}: MCP tools need the `mcp` package (the Model Context Protocol SDK), which is not "
                          "installed; pip install 'verl[mcp]' (or `mcp`)")


class TokenBucket:
    """At most ``rate_limit`` calls per second on average, in bursts of up to ``max(1, rate_limit)``."""

    def __init__(self, rate_limit: float, clock: Callable[[], float] = time.monotonic):
        rate = float(rate_limit)
        if not rate > 0:
            raise ValueError(f"rate_limit must be a positive number of calls per second; got {rate_limit!r}")
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self._clock = clock
        self._last = clock()

    def _refill(self) -> None:
        now = self._clock()
        self.tokens = min(self.capacity, self.tokens + (now - self._last) * self.rate)
        self._last = now

    def acquire(self) -> bool:
        """Take a token if one is there."""
        self._refill()
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False

    def wait_time(self) -> float:
        """Seconds until the next token."""
        self._refill()
        return 0.0 if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate


def mcp2openai(mcp_tool: Any) -> dict[str, Any]:
    """An MCP ``Tool`` as the OpenAI function schema the model is shown (its input schema as the parameters)."""
    wire = mcp_tool.model_dump(by_alias=True, exclude_none=True) if hasattr(mcp_tool, "model_dump") else dict(mcp_tool)
    parameters = dict(wire.get("inputSchema") or {"type": "object", "properties": {}})
    parameters.setdefault("required", [])
    return {"type": "function",
            "function": {"name": wire["name"], "description": wire.get("description") or "", "parameters": parameters,
                         "strict": False}}


async def _open_streams(stack: AsyncExitStack, spec: MCPServerSpec) -> tuple[Any, Any]:
    if spec.transport == "stdio":
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=spec.command, args=list(spec.args), env=dict(spec.env) or None,
                                       cwd=spec.cwd)
        streams = await stack.enter_async_context(stdio_client(params))
    elif spec.transport == "sse":
        from mcp.client.sse import sse_client

        streams = await stack.enter_async_context(sse_client(spec.url, headers=dict(spec.headers) or None))
    else:
        from mcp.client import streamable_http
        from mcp.shared._httpx_utils import create_mcp_http_client

        if hasattr(streamable_http, "streamable_http_client"):  # mcp >= 1.24 and 2.x: headers ride on the client
            client = await stack.enter_async_context(create_mcp_http_client(headers=dict(spec.headers) or None))
            streams = await stack.enter_async_context(streamable_http.streamable_http_client(spec.url,
                                                                                             http_client=client))
        else:
            streams = await stack.enter_async_context(
                streamable_http.streamablehttp_client(spec.url, headers=dict(spec.headers) or None))
    return streams[0], streams[1]


class _Link:
    """One server's session, kept open by a task of the manager's loop until ``stop`` is set."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.ready: asyncio.Future = loop.create_future()
        self.stop = asyncio.Event()
        self.task: asyncio.Task | None = None


class MCPClientManager:
    rootServerName = ROOT_KEY
    connect_timeout_s = 20.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.servers: dict[str, MCPServerSpec] = {}
        self.rate_limiters: dict[str, TokenBucket] = {}
        self.tool_client_mapping: dict[str, str] = {}  # tool name -> server name
        self._links: dict[str, _Link] = {}  # touched only on the manager's loop

    @property
    def initialized(self) -> bool:
        return bool(self.servers)

    # ---- loading servers (plain code; no connection yet)
    def add_servers_file(self, path: str, rate_limit: float | None = None,
                         where: str = "mcp.mcp_servers_config_path") -> list[str]:
        """Load the servers of ``path``; returns their names. A name already loaded must mean the same server, at
        the same rate limit."""
        specs = load_mcp_servers(path, where)
        rate = DEFAULT_RATE_LIMIT if rate_limit is None else float(rate_limit)
        with self._lock:
            for spec in specs:
                known = self.servers.get(spec.name)
                if known is not None and known != spec:
                    raise ValueError(f"{where}: MCP server {spec.name!r} of {path!r} ({spec.describe()}) is not the "
                                     f"server of that name already loaded ({known.describe()}); rename one of them")
                if known is not None and self.rate_limiters[spec.name].rate != rate:
                    raise ValueError(f"{where}: MCP server {spec.name!r} is used by two tool entries with different "
                                     f"config.rate_limit ({self.rate_limiters[spec.name].rate:g} and {rate:g}); "
                                     "one server has one limit, so give both entries the same value")
                self.servers[spec.name] = spec
                self.rate_limiters.setdefault(spec.name, TokenBucket(rate))
        return [spec.name for spec in specs]

    # ---- upstream's async API
    async def initialize(self, config_path: str, rate_limit: float = DEFAULT_RATE_LIMIT) -> None:
        self.add_servers_file(config_path, rate_limit)

    async def fetch_tool_schemas(self, tool_selected_list: list[str] | None,
                                 servers: list[str] | None = None) -> list[dict]:
        return await asyncio.wrap_future(self._submit(self._fetch(tool_selected_list, servers, "MCP tools")))

    async def call_tool(self, tool_name: str, parameters: dict[str, Any], timeout: float | None = None) -> Any:
        """The server's ``CallToolResult`` for one call (its ``content`` parts and error flag)."""
        return await asyncio.wrap_future(self._submit(self._call(tool_name, parameters, timeout)))

    def get_client_with_tool_name(self, tool_name: str) -> MCPServerSpec:
        return self.servers[self.tool_client_mapping[tool_name]]

    # ---- plain-code API
    def fetch_tool_schemas_sync(self, tool_selected_list: list[str] | None, servers: list[str] | None = None,
                                where: str = "MCP tools") -> list[dict]:
        return self._submit(self._fetch(tool_selected_list, servers, where)).result()

    def close(self, timeout_s: float = 10.0) -> None:
        """Close every session (stdio servers exit) and stop the loop."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None or not thread.is_alive():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close_links(), loop).result(timeout_s)
        except Exception:  # noqa: BLE001 - closing is best effort; the daemon thread goes with the process
            logger.warning("closing MCP sessions did not finish", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        self._loop = self._thread = None

    # ---- the manager's loop
    def _submit(self, coro):
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="verl-mcp-clients", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
                atexit.register(self.close)
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("MCPClientManager: called from its own loop; await the coroutine instead")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _session(self, name: str, deadline_s: float | None = None) -> Any:
        link = self._links.get(name)
        if link is None or link.task is None or link.task.done():
            link = _Link(asyncio.get_running_loop())
            link.task = asyncio.ensure_future(self._keep(self.servers[name], link))
            self._links[name] = link
        try:
            return await asyncio.wait_for(asyncio.shield(link.ready), deadline_s or self.connect_timeout_s)
        except asyncio.TimeoutError:
            link.task.cancel()
            raise ConnectionError(f"MCP server {name!r} ({self.servers[name].describe()}) did not finish connecting "
                                  f"within {deadline_s or self.connect_timeout_s:g} s") from None

    async def _keep(self, spec: MCPServerSpec, link: _Link) -> None:
        from mcp import ClientSession

        try:
            async with AsyncExitStack() as stack:
                read, write = await _open_streams(stack, spec)
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                link.ready.set_result(session)
                await link.stop.wait()
        except Exception as exc:  # noqa: BLE001 - handed to whoever waits for the session
            if not link.ready.done():
                link.ready.set_exception(ConnectionError(f"MCP server {spec.name!r} ({spec.describe()}): could not "
                                                         f"connect: {_first_cause(exc)}"))
            else:
                logger.warning("MCP server %r (%s): session ended: %s", spec.name, spec.describe(), _first_cause(exc))
        finally:
            if not link.ready.done():
                link.ready.set_exception(ConnectionError(f"MCP server {spec.name!r}: connection cancelled"))

    async def _connect_with_retries(self, name: str) -> Any:
        """Upstream waits for servers that are still starting; here until ``connect_timeout_s`` has passed."""
        deadline = time.monotonic() + self.connect_timeout_s
        while True:
            try:
                return await self._session(name, max(0.1, deadline - time.monotonic()))
            except ConnectionError:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))

    async def _fetch(self, selected: list[str] | None, servers: list[str] | None, where: str) -> list[dict]:
        names = list(self.servers) if servers is None else list(servers)
        found: dict[str, tuple[str, dict]] = {}
        for name in names:
            session = await self._connect_with_retries(name)
            listed = await session.list_tools()
            for tool in listed.tools:
                if selected and tool.name not in selected:
                    continue
                owner = found.get(tool.name, (None,))[0] or self.tool_client_mapping.get(tool.name)
                if owner is not None and owner != name:
                    raise ValueError(f"{where}: tool {tool.name!r} is served by both MCP servers {owner!r} and "
                                     f"{name!r}; the model calls tools by name, so pick one with "
                                     "mcp.tool_selected_list or split the servers file")
                found[tool.name] = (name, mcp2openai(tool))
        missing = [tool for tool in (selected or []) if tool not in found]
        if missing:
            raise ValueError(f"{where}: mcp.tool_selected_list names {missing}, which no server of "
                             f"{names} serves; they serve {sorted(found) or 'no selected tool'}")
        if not found:
            raise ValueError(f"{where}: the MCP servers {names} serve no tools")
        for tool_name, (server, _) in found.items():
            self.tool_client_mapping[tool_name] = server
        return [schema for _, schema in found.values()]

    async def _call(self, tool_name: str, parameters: dict[str, Any], timeout: float | None) -> Any:
        server = self.tool_client_mapping.get(tool_name)
        if server is None:
            raise KeyError(f"MCP tool {tool_name!r} was not fetched from any server; known: "
                           f"{sorted(self.tool_client_mapping)}")
        bucket = self.rate_limiters[server]
        while not bucket.acquire():
            await asyncio.sleep(bucket.wait_time())
        session = await self._session(server)
        try:
            return await asyncio.wait_for(session.call_tool(tool_name, parameters), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"MCP tool {tool_name!r} did not answer within {timeout:g} s") from None
        except Exception as exc:
            if not _is_connection_loss(exc):
                raise
            # not retried: the call may have run; the next call opens a new session
            self._drop(server)
            raise ConnectionError(f"MCP server {server!r} ({self.servers[server].describe()}): connection lost "
                                  f"during the call of {tool_name!r} ({_first_cause(exc)}); the next call "
                                  "reconnects") from exc

    def _drop(self, name: str) -> None:
        link = self._links.pop(name, None)
        if link is not None:
            link.stop.set()
            if link.task is not None:
                link.task.cancel()

    async def _close_links(self) -> None:
        links, self._links = list(self._links.values()), {}
        for link in links:
            link.stop.set()
        tasks = [link.task for link in links if link.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=10.0)


_CONNECTION_CLOSED = -32000  # the JSON-RPC code the MCP SDK gives a request whose connection closed
_TRANSPORT_ERRORS = {"ConnectError", "ReadError", "WriteError", "RemoteProtocolError", "ClosedResourceError",
                     "BrokenResourceError", "EndOfStream"}


def _is_connection_loss(exc: BaseException) -> bool:
    """The session is gone (not a tool's or the model's error, which the server answers)."""
    if getattr(getattr(exc, "error", None), "code", None) == _CONNECTION_CLOSED:
        return True
    return isinstance(exc, ConnectionError) or type(exc).__name__ in _TRANSPORT_ERRORS


def _first_cause(exc: BaseException) -> str:
    """The first leaf of an exception group (anyio wraps transport errors), as ``Type: message``."""
    while getattr(exc, "exceptions", None):  # BaseExceptionGroup (python >= 3.11, exceptiongroup before)
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


ClientManager = MCPClientManager()
