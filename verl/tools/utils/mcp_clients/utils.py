"""``TokenBucket`` and ``mcp2openai`` at upstream's import path."""

from verl.utils.mcp.client_manager import TokenBucket, mcp2openai

__all__ = ["TokenBucket", "mcp2openai"]
