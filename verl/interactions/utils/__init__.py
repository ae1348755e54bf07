"""Loading interactions from an interaction-config YAML."""
