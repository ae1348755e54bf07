"""``tool_agent``: generate, run the tool calls the model wrote, feed the results back, until the model answers.

Token in, token out: the model's tokens are kept exactly as the engine produced them (``response_mask`` 1); each
tool or user turn is rendered with the chat template and appended as tokens (``response_mask`` 0), so the model
sees the same ids at the next turn that the trainer later scores. Nothing the model wrote is re-tokenized.

Everything that can go wrong with a call (unreadable block, unknown tool, too many calls, the tool raising or
timing out) is answered to the model as an error text and counted, never raised.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from verl.utils.rollout_trace import rollout_trace_op
from verl.workers.rollout.agent_loop.base import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput
from verl.workers.rollout.agent_loop.registry import register
from verl.workers.rollout.agent_loop.rendering import ChatRenderer, truncate_text
from verl.workers.rollout.agent_loop.tool_parser import FunctionCall, HermesToolParser

logger = logging.getLogger(__name__)

__all__ = ["ToolAgentLoop"]

# A tool call that has not answered after this long is cancelled and reported to the model as timed out. A tool
# may set its own with `tool_call_timeout` in its config block of the tool YAML.
TOOL_CALL_TIMEOUT_S = 60.0


@register("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    tools: dict[str, Any] = {}
    tool_schemas: list[dict] = []
    interactions: dict[str, Any] = {}

    @classmethod
    def init_class(cls, config, tokenizer, processor=None, **kwargs: Any) -> None:
        multi_turn = config.config.actor_rollout_ref.rollout.multi_turn
        cls.tools, cls.tool_schemas = load_tools(multi_turn.tool_config_path)
        cls.interactions = load_interactions(multi_turn.interaction_config_path)
        # data.apply_chat_template_kwargs, sent by the trainer with the batch (agent_loop.base.with_template_kwargs)
        data = getattr(config.config, "data", None)
        cls.renderer = ChatRenderer(tokenizer, multi_turn.chat_template,
                                    "actor_rollout_ref.rollout.multi_turn.chat_template",
                                    dict(getattr(data, "apply_chat_template_kwargs", None) or {}))
        cls.parser = HermesToolParser()
        cls.multi_turn = multi_turn

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = _messages(kwargs)
        extra_info = kwargs.get("extra_info") or {}
        tools_kwargs = kwargs.get("tools_kwargs") or extra_info.get("tools_kwargs") or {}
        interaction, interaction_kwargs = self._interaction(kwargs, extra_info)
        state = _Trajectory(uuid.uuid4().hex)
        prompt_ids = self.renderer.prompt_ids(messages, self.tool_schemas)
        if interaction is not None:
            await interaction.start_interaction(state.request_id, **interaction_kwargs)
        try:
            await self._turns(state, prompt_ids, messages, sampling_params, tools_kwargs, interaction,
                              interaction_kwargs)
        finally:
            await self._release(state, tools_kwargs)
            if interaction is not None:
                await interaction.finalize_interaction(state.request_id, **interaction_kwargs)
        sanity = self.renderer.check_tokens(prompt_ids + state.response_ids, messages, self.tool_schemas,
                                            self.multi_turn.tokenization_sanity_check_mode)
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=state.response_ids, response_mask=state.mask,
            response_logprobs=state.log_probs if state.has_log_probs else None,
            num_turns=len(messages), metrics=AgentLoopMetrics(state.generate_s, state.tool_s),
            extra_fields={"turn_scores": state.turn_scores, "tool_rewards": state.tool_rewards,
                          "__tool_calls__": state.tool_calls, "__tool_errors__": state.tool_errors,
                          "__tokenization_mismatch__": int(not sanity)})

    # -- the turn loop ---------------------------------------------------------------------------------------------

    async def _turns(self, state: _Trajectory, prompt_ids: list[int], messages: list[dict], sampling_params: dict,
                     tools_kwargs: dict, interaction: Any, interaction_kwargs: dict) -> None:
        cfg = self.multi_turn
        assistant_turns = user_turns = 0
        while True:
            budget = self.response_length - len(state.response_ids)
            if budget <= 0:
                return
            start = time.perf_counter()
            out = await self.server_manager.generate(state.request_id, prompt_ids=prompt_ids + state.response_ids,
                                                     sampling_params={**sampling_params, "max_tokens": budget})
            state.generate_s += time.perf_counter() - start
            state.add(out.token_ids, 1, out.log_probs)
            assistant_turns += 1
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            parsed = self.parser.parse(text)
            messages.append({"role": "assistant", "content": text})
            if out.stop_reason == "length" or (cfg.max_assistant_turns and assistant_turns >= cfg.max_assistant_turns):
                return
            if parsed.calls or parsed.errors:
                new_messages = await self._call_tools(state, parsed.calls, parsed.errors, tools_kwargs)
            elif interaction is not None:
                if cfg.max_user_turns and user_turns >= cfg.max_user_turns:
                    return
                done, content, score, _ = await interaction.generate_response(state.request_id, messages,
                                                                             **interaction_kwargs)
                user_turns += 1
                state.turn_scores.append(float(score))
                if done:
                    return
                new_messages = [{"role": "user", "content": content}]
            else:
                return
            delta = self.renderer.delta_ids(messages, new_messages, self.tool_schemas, out.token_ids)
            messages.extend(new_messages)
            if len(state.response_ids) + len(delta) >= self.response_length:
                return  # no room left for the model to answer: end with its last own turn
            state.add(delta, 0, None)

    @rollout_trace_op
    async def _call_tools(self, state: _Trajectory, calls: list[FunctionCall], errors: list[str],
                          tools_kwargs: dict) -> list[dict]:
        """One tool message per call (and per unreadable block), in the order written."""
        limit = self.multi_turn.max_parallel_calls
        texts = [f"Error: {e}" for e in errors]
        over = calls[limit:]
        texts += [f"Error: at most {limit} tool call(s) per turn; {c.name} was not run" for c in over]
        start = time.perf_counter()
        results = await asyncio.gather(*[self._call_one(state, call, tools_kwargs) for call in calls[:limit]])
        state.tool_s += time.perf_counter() - start
        state.tool_calls += len(calls) + len(errors)
        state.tool_errors += len(errors) + len(over) + sum(1 for _, failed in results if failed)
        texts = [text for text, _ in results] + texts
        side = self.multi_turn.tool_response_truncate_side
        return [{"role": "tool", "content": truncate_text(t, self.multi_turn.max_tool_response_length, side)}
                for t in texts]

    async def _call_one(self, state: _Trajectory, call: FunctionCall, tools_kwargs: dict) -> tuple[str, bool]:
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return f"Error: unknown tool {call.name!r}; available tools: {known}", True
        per_tool = tools_kwargs.get(call.name) or {}
        timeout = float((getattr(tool, "config", None) or {}).get("tool_call_timeout", TOOL_CALL_TIMEOUT_S))
        try:
            instance_id = await self._instance(state, call.name, tool, per_tool)
            response, reward, _ = await asyncio.wait_for(
                tool.execute(instance_id, call.arguments, **(per_tool.get("execute_kwargs") or {})), timeout)
        except asyncio.TimeoutError:
            return f"Error: {call.name} did not answer within {timeout:g} s", True
        except Exception as err:  # noqa: BLE001 - a tool's failure is the model's information, not a crash
            logger.debug("tool %s raised", call.name, exc_info=True)
            return f"Error: {call.name} failed: {type(err).__name__}: {err}", True
        state.tool_rewards.append(float(reward or 0.0))
        text = getattr(response, "text", None)
        return (text if text is not None else ""), False

    async def _instance(self, state: _Trajectory, name: str, tool: Any, per_tool: dict) -> str:
        if name not in state.instances:
            create_kwargs = dict(per_tool.get("create_kwargs") or {})
            instance_id, _ = await tool.create(create_kwargs=create_kwargs, **create_kwargs)
            state.instances[name] = instance_id
        return state.instances[name]

    async def _release(self, state: _Trajectory, tools_kwargs: dict) -> None:
        for name, instance_id in state.instances.items():
            try:
                await self.tools[name].release(instance_id, **((tools_kwargs.get(name) or {}).get("release_kwargs")
                                                               or {}))
            except Exception:  # noqa: BLE001 - a failed release must not lose the trajectory
                logger.warning("releasing tool %s instance %s failed", name, instance_id, exc_info=True)

    def _interaction(self, kwargs: dict, extra_info: dict) -> tuple[Any, dict]:
        if not self.interactions:
            return None, {}
        interaction_kwargs = dict(kwargs.get("interaction_kwargs") or extra_info.get("interaction_kwargs") or {})
        name = interaction_kwargs.get("name")
        if name is None and len(self.interactions) == 1:
            name = next(iter(self.interactions))
        if name not in self.interactions:
            raise KeyError(f"row's extra_info.interaction_kwargs.name={name!r} is not in the interaction config "
                           f"(actor_rollout_ref.rollout.multi_turn.interaction_config_path); known: "
                           f"{', '.join(sorted(self.interactions))}")
        return self.interactions[name], interaction_kwargs


class _Trajectory:
    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.response_ids: list[int] = []
        self.mask: list[int] = []
        self.log_probs: list[float] = []
        self.has_log_probs = True
        self.instances: dict[str, str] = {}
        self.turn_scores: list[float] = []
        self.tool_rewards: list[float] = []
        self.tool_calls = self.tool_errors = 0
        self.generate_s = self.tool_s = 0.0

    def add(self, ids: list[int], mask_value: int, log_probs: list[float] | None) -> None:
        self.response_ids += ids
        self.mask += [mask_value] * len(ids)
        if mask_value and log_probs is None:
            self.has_log_probs = False
        self.log_probs += list(log_probs) if log_probs is not None else [0.0] * len(ids)


def _messages(kwargs: dict) -> list[dict]:
    raw = kwargs.get("raw_prompt")
    if raw is None:
        raise KeyError("tool_agent needs the row's chat messages: set data.return_raw_chat=true")
    return [dict(m) for m in list(raw)]


def load_tools(path: str | None) -> tuple[dict[str, Any], list[dict]]:
    if not path:
        return {}, []
    from verl.tools.utils.tool_registry import initialize_tools_from_config

    tools = initialize_tools_from_config(path)
    by_name, schemas = {}, []
    for tool in tools:
        schema = tool.get_openai_tool_schema()
        dumped = (schema.model_dump(exclude_unset=True, exclude_none=True) if hasattr(schema, "model_dump")
                  else dict(schema))  # exactly the YAML's schema, no defaults added
        by_name[dumped["function"]["name"]] = tool
        schemas.append(dumped)
    return by_name, schemas


def load_interactions(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    from verl.interactions.utils.interaction_registry import initialize_interactions_from_config

    return initialize_interactions_from_config(path)
