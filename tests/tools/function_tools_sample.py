"""Function tools for the tests (loaded as a function_tool_path file)."""

import asyncio

from verl.tools.function_tool import function_tool
from verl.tools.schemas import ToolResponse


@function_tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


@function_tool("shout_text")
async def shout(text: str, times: int = 1) -> str:
    """Upper-case a text.

    Args:
        text: The text.
        times: How many times to repeat it.
    """
    await asyncio.sleep(0)
    return " ".join([text.upper()] * times)


@function_tool(schema={"type": "function", "function": {
    "name": "grade", "description": "Grade an answer.",
    "parameters": {"type": "object", "properties": {"answer": {"type": "string", "description": "the answer"}},
                   "required": ["answer"]}}})
def grade(answer):
    return ToolResponse(text=f"graded {answer}"), 1.0 if answer == "42" else 0.0, {"graded": 1}
