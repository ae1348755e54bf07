"""BaseTool: upstream verl's tool API. One tool object serves every trajectory; per-trajectory state lives under an
instance id that ``create`` hands out and ``release`` frees.

A rollout calls, per trajectory and tool: ``create(**create_kwargs)`` (the row's
``extra_info.tools_kwargs.<tool name>.create_kwargs``), then ``execute`` once per call the model makes, optionally
``calc_reward``, and finally ``release``. All four are coroutines so that many trajectories share one event loop.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import uuid4

from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["BaseTool"]

logger = logging.getLogger(__name__)


class BaseTool:
    """Subclass it, override ``execute`` (and ``create`` / ``calc_reward`` / ``release`` when the tool keeps state),
    and name the subclass in a tool-config YAML (see docs/tools.md).

    ``tool_schema`` is what the model sees; a subclass that has a fixed schema may override
    ``get_openai_tool_schema`` and accept ``tool_schema=None``.
    """

    def __init__(self, config: dict[str, Any] | None, tool_schema: OpenAIFunctionToolSchema | dict | None):
        self.config: dict[str, Any] = dict(config or {})
        self.tool_schema = tool_schema
        if self.tool_schema is None:
            self.tool_schema = self.get_openai_tool_schema()
        if isinstance(self.tool_schema, dict):
            self.tool_schema = OpenAIFunctionToolSchema.model_validate(self.tool_schema)
        if not isinstance(self.tool_schema, OpenAIFunctionToolSchema):
            raise ValueError(
                f"{type(self).__name__}: no tool schema; give tool_schema (the YAML entry's tool_schema: "
                "{type: function, function: {name, description, parameters}}) or override get_openai_tool_schema()"
            )
        self.name: str = self.tool_schema.function.name
        self._instance_dict: dict[str, dict[str, Any]] = {}
        logger.debug("tool %s: %s", self.name, self.tool_schema.model_dump(exclude_none=True))

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema | None:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        """Start a trajectory's state; returns its id (a new uuid when none is given) and an initial response
        (empty unless the tool has something to tell the model up front)."""
        if instance_id is None:
            instance_id = str(uuid4())
        self._instance_dict[instance_id] = {}
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[ToolResponse, float, dict]:
        """Run one call. Returns (response to the model, step reward, metrics)."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instance_dict.pop(instance_id, None)
