"""Model Context Protocol clients for MCP tools: the servers file (``servers``), the connections (``client_manager``)
and a tool-config entry of ``config.type: mcp`` (``tool_entry``)."""
