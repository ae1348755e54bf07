"""``from verl.tools.utils.mcp_clients.McpClientManager import ClientManager``, as upstream imports it."""

from verl.utils.mcp.client_manager import ClientManager, MCPClientManager

__all__ = ["ClientManager", "MCPClientManager"]
