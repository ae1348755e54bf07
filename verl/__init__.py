"""verl"""

from verl.protocol import DataProto

__all__ = ["DataProto"]
