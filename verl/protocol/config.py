"""``DataProtoConfig``: process-wide DataProto switches, at upstream verl's name.

``DataProtoConfig.auto_padding`` (also on with the environment variable ``VERL_AUTO_PADDING=1`` / ``true``) lets
``DataProto.chunk`` split a length that the number of chunks does not divide. One DataProto can turn it on for
itself alone with ``DataProto.from_dict(..., auto_padding=True)``, which records ``AUTO_PADDING_KEY`` in its
meta_info. The worker group's DP_COMPUTE_PROTO dispatch pads every DataProto to a multiple of the world size
whatever this switch says (and removes the pad rows from the result), so the switch matters for direct calls to
``chunk`` only.
"""

from __future__ import annotations

import os

from verl.protocol.helpers import ProtocolAssertionError

__all__ = ["AUTO_PADDING_ENV", "AUTO_PADDING_KEY", "DataProtoConfig"]

AUTO_PADDING_KEY = "_verl_auto_padding"
AUTO_PADDING_ENV = "VERL_AUTO_PADDING"


class _DataProtoConfigMeta(type):
    """Class-level properties, so that ``DataProtoConfig.auto_padding = True`` works without an instance."""

    _config: dict = {}
    auto_padding_key = AUTO_PADDING_KEY

    @property
    def auto_padding(cls) -> bool:
        from_env = os.getenv(AUTO_PADDING_ENV, "false").strip().lower() in ("1", "true")
        return from_env or bool(cls._config.get(AUTO_PADDING_KEY, False))

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        if not isinstance(enabled, bool):
            raise ProtocolAssertionError(
                f"DataProtoConfig.auto_padding must be True or False, got {enabled!r} ({type(enabled).__name__})"
            )
        cls._config[AUTO_PADDING_KEY] = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """``DataProtoConfig.auto_padding``: read or set the process-wide auto-padding switch."""
