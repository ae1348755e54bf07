"""OpenAI function-calling schemas (upstream's pydantic models) and what a tool hands back to the model.

``OpenAIFunctionToolSchema.model_dump()`` is the dict a chat template receives in its ``tools`` argument; the
tool-config YAML's ``tool_schema`` entry is validated into it. A tool call parsed out of generated text arrives as
``OpenAIFunctionParsedSchema`` (arguments still a JSON string) and becomes ``OpenAIFunctionCallSchema`` (arguments a
dict) through ``from_openai_function_parsed_schema``, which reports bad JSON instead of raising, because a malformed
call is the model's mistake and goes back to it as a message.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, model_validator

__all__ = [
    "OpenAIFunctionPropertySchema",
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolSchema",
    "OpenAIFunctionParsedSchema",
    "OpenAIFunctionCallSchema",
    "OpenAIFunctionToolCall",
    "ToolResponse",
]


class OpenAIFunctionPropertySchema(BaseModel):
    """One argument of a function: its JSON type, what it means, and optionally the values it may take."""

    type: str
    description: str | None = None
    enum: list[str] | None = None


class OpenAIFunctionParametersSchema(BaseModel):
    """The arguments object of a function (``type`` is "object" in practice)."""

    type: str
    properties: dict[str, OpenAIFunctionPropertySchema]
    required: list[str]


class OpenAIFunctionSchema(BaseModel):
    name: str
    description: str
    parameters: OpenAIFunctionParametersSchema
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    """``{"type": "function", "function": {name, description, parameters}}``: one entry of a chat template's tools."""

    type: str
    function: OpenAIFunctionSchema


class OpenAIFunctionParsedSchema(BaseModel):
    """A call as the parser read it from the generated text: the arguments are still an unparsed JSON string."""

    name: str
    arguments: str


class OpenAIFunctionCallSchema(BaseModel):
    """A call with decoded arguments, ready for ``BaseTool.execute(instance_id, arguments)``."""

    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(
        parsed_schema: OpenAIFunctionParsedSchema,
    ) -> tuple[OpenAIFunctionCallSchema, bool]:
        """(call, has_decode_error). Arguments that are not a JSON object give ``{}`` and ``has_decode_error=True``."""
        try:
            arguments = json.loads(parsed_schema.arguments)
        except (json.JSONDecodeError, TypeError):
            return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={}), True
        if not isinstance(arguments, dict):
            return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={}), True
        return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments=arguments), False


class OpenAIFunctionToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionCallSchema


class ToolResponse(BaseModel):
    """What a tool returns to the model: text, and for multimodal tools lists of images / videos."""

    text: str | None = None
    image: list[Any] | None = None
    video: list[Any] | None = None

    @model_validator(mode="before")
    @classmethod
    def _media_must_be_lists(cls, values: Any) -> Any:
        # A single image passed bare is the common mistake; a list of one is what the rollout expects.
        if isinstance(values, dict):
            for key in ("image", "video"):
                value = values.get(key)
                if value is not None and not isinstance(value, list):
                    raise ValueError(
                        f"ToolResponse.{key} must be a list, got {type(value).__name__}; wrap a single {key} in a "
                        f"list: ToolResponse({key}=[x])"
                    )
        return values

    def is_empty(self) -> bool:
        return not self.text and not self.image and not self.video

    def is_text_only(self) -> bool:
        return bool(self.text) and not self.image and not self.video
