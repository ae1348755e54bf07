"""verl.tools.schemas: the OpenAI tool schema round trip, decoding a parsed call, ToolResponse."""

import pytest
from pydantic import ValidationError

from verl.tools.schemas import (
    OpenAIFunctionCallSchema,
    OpenAIFunctionParsedSchema,
    OpenAIFunctionToolCall,
    OpenAIFunctionToolSchema,
    ToolResponse,
)

SCHEMA = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city"],
        },
    },
}


def test_tool_schema_round_trips_to_the_dict_a_chat_template_gets():
    schema = OpenAIFunctionToolSchema.model_validate(SCHEMA)
    assert schema.function.parameters.properties["unit"].enum == ["c", "f"]
    # Unset fields (strict, a missing description/enum) are left out, so the template sees the YAML's dict.
    assert schema.model_dump(exclude_unset=True, exclude_none=True) == SCHEMA
    full = schema.model_dump()
    assert full["function"]["strict"] is False and full["function"]["parameters"]["properties"]["city"]["enum"] is None
    assert OpenAIFunctionToolSchema.model_validate(full) == schema


def test_tool_schema_rejects_a_function_without_parameters():
    with pytest.raises(ValidationError, match="parameters"):
        OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {"name": "f", "description": "d"}})


@pytest.mark.parametrize(
    ("arguments", "expected", "error"),
    [
        ('{"city": "Paris", "days": 2}', {"city": "Paris", "days": 2}, False),
        ('{"city": "Paris"', {}, True),  # truncated JSON
        ('["Paris"]', {}, True),  # valid JSON, but not an object
        ("", {}, True),
    ],
)
def test_parsed_call_decodes_arguments_and_reports_errors(arguments, expected, error):
    parsed = OpenAIFunctionParsedSchema(name="get_weather", arguments=arguments)
    call, has_error = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(parsed)
    assert (call.name, call.arguments, has_error) == ("get_weather", expected, error)


def test_tool_call_wraps_a_decoded_call():
    call = OpenAIFunctionToolCall(id="call_0", function={"name": "f", "arguments": {"x": 1}})
    assert call.model_dump() == {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}


def test_tool_response_fields_and_media_lists():
    assert ToolResponse().is_empty() and not ToolResponse().is_text_only()
    response = ToolResponse(text="42")
    assert (response.text, response.image, response.video) == ("42", None, None) and response.is_text_only()
    assert not ToolResponse(text="see", image=["img"]).is_text_only()
    with pytest.raises(ValidationError, match="image must be a list"):
        ToolResponse(image="img")
