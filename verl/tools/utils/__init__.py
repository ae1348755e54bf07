"""Loading tools from a tool-config YAML."""
