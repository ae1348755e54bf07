"""A scripted engine backend for agent-loop tests: answers each request with text chosen from the conversation so
far (decoded from the request's token ids), so tool calling can be tested without a model that calls tools."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import ToolResponse
from verl.workers.rollout.agent_loop.server import TokenOutput

LOG_PROB = -0.5


class ScriptedBackend:
    """``script(conversation_text) -> reply text``; every reply ends with the tokenizer's EOS (end of turn)."""

    def __init__(self, tokenizer, script: Callable[[str], str]) -> None:
        self.tokenizer = tokenizer
        self.script = script
        self.queue = []
        self.batches: list[int] = []

    def add(self, request) -> None:
        self.queue.append(request)

    def has_work(self) -> bool:
        return bool(self.queue)

    def idle(self) -> bool:
        return True

    def in_flight(self) -> int:
        return len(self.queue)

    def step(self):
        batch, self.queue = self.queue, []
        self.batches.append(len(batch))
        done = []
        for request in batch:
            text = self.script(self.tokenizer.decode(request.prompt_ids, skip_special_tokens=False))
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
            limit = request.sampling_params["max_tokens"]
            reason = "stop" if len(ids) <= limit else "length"
            ids = ids[:limit]
            done.append((request, TokenOutput(ids, [LOG_PROB] * len(ids), reason)))
        return done

    def fail_all(self, err) -> None:
        self.queue.clear()

    def abort_all(self, err) -> None:
        for request in self.queue:
            request.future.set_exception(err)
        self.queue.clear()


class CalcTool(BaseTool):
    """calc(expression): evaluates digits and + - * ; "boom" raises, "slow" sleeps past the call timeout."""

    created: list[dict] = []
    released: list[str] = []

    async def create(self, instance_id=None, **kwargs):
        instance_id, response = await super().create(instance_id, **kwargs)
        type(self).created.append(dict(kwargs.get("create_kwargs") or {}))
        return instance_id, response

    async def execute(self, instance_id, parameters, **kwargs):
        expression = str(parameters.get("expression", ""))
        if expression == "boom":
            raise RuntimeError("calculator exploded")
        if expression == "slow":
            await asyncio.sleep(5)
        if not set(expression) <= set("0123456789+-* "):
            return ToolResponse(text=f"cannot evaluate {expression!r}"), 0.0, {}
        return ToolResponse(text=str(eval(expression))), 1.0, {}  # noqa: S307 - digits and operators only

    async def release(self, instance_id, **kwargs):
        type(self).released.append(instance_id)
        await super().release(instance_id, **kwargs)


CALC_SCHEMA = {"type": "function", "function": {
    "name": "calc", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"expression": {"type": "string", "description": "e.g. 12*13"}},
                   "required": ["expression"]}}}
