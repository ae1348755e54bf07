"""A tool-config entry of ``config.type: mcp`` (upstream's layout)::

    tools:
      - class_name: verl.tools.mcp_search_tool.MCPSearchTool
        config: {type: mcp, rate_limit: 120, timeout: 120}
        mcp:
          mcp_servers_config_path: ./mcp_server.json
          tool_selected_list: [tavily_search_tool]     # optional: every tool of the servers when missing

The servers supply the tools' schemas, so the entry has no ``tool_schema``; it yields one tool per served (and
selected) tool. ``check_mcp_entry`` reads the entry and the servers file without connecting (the check before Ray);
``mcp_entry_schemas`` connects and lists the tools.
"""

from __future__ import annotations

from typing import Any

from verl.utils.mcp.servers import load_mcp_servers

__all__ = ["MCP_SECTION_KEYS", "check_mcp_entry", "mcp_entry_schemas"]

MCP_SECTION_KEYS = ("mcp_servers_config_path", "tool_selected_list")


def check_mcp_entry(entry: dict[str, Any], where: str) -> tuple[str, list[str] | None, float | None]:
    """(servers file, selected tool names or None, rate limit or None) of a valid entry; ValueError naming ``where``
    and the key otherwise. Reads the servers file and checks that the MCP SDK is installed."""
    from verl.utils.mcp.client_manager import require_mcp_sdk

    section = entry.get("mcp")
    if not isinstance(section, dict) or not section.get("mcp_servers_config_path"):
        raise ValueError(f"{where}: config.type 'mcp' needs an `mcp:` mapping beside `config:` with "
                         "mcp_servers_config_path (the JSON servers file) and optionally tool_selected_list")
    unknown = sorted(set(section) - set(MCP_SECTION_KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown} under mcp; known: {list(MCP_SECTION_KEYS)}")
    if entry.get("tool_schema") is not None:
        raise ValueError(f"{where}: an MCP entry takes its tools' schemas from its servers; remove tool_schema "
                         "(or make it a native entry)")
    selected = section.get("tool_selected_list")
    if selected is not None and (not isinstance(selected, list) or not all(isinstance(s, str) for s in selected)):
        raise ValueError(f"{where}: mcp.tool_selected_list must be a list of tool names; got {selected!r}")
    config = entry.get("config") or {}
    rate = config.get("rate_limit")
    if rate is not None and not (isinstance(rate, int | float) and not isinstance(rate, bool) and rate > 0):
        raise ValueError(f"{where}: config.rate_limit must be a positive number of calls per second; got {rate!r}")
    timeout = config.get("timeout")
    if timeout is not None and not (isinstance(timeout, int | float) and not isinstance(timeout, bool)
                                    and timeout > 0):
        raise ValueError(f"{where}: config.timeout must be a positive number of seconds; got {timeout!r}")
    path = str(section["mcp_servers_config_path"])
    load_mcp_servers(path, f"{where}: mcp.mcp_servers_config_path")
    require_mcp_sdk(where)
    return path, (list(selected) if selected else None), (None if rate is None else float(rate))


def mcp_entry_schemas(entry: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The OpenAI function schemas of the tools the entry's servers serve (those selected), in server order."""
    from verl.utils.mcp.client_manager import ClientManager

    path, selected, rate = check_mcp_entry(entry, where)
    servers = ClientManager.add_servers_file(path, rate, where=f"{where}: mcp.mcp_servers_config_path")
    return ClientManager.fetch_tool_schemas_sync(selected, servers=servers, where=where)
