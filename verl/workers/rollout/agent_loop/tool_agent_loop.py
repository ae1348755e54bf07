"""``tool_agent``: generate, run the tool calls the model wrote, feed the results back, until the model answers.

Token in, token out: the model's tokens are kept exactly as the engine produced them (``response_mask`` 1); each
tool or user turn is rendered with the chat template and appended as tokens (``response_mask`` 0), so the model
sees the same ids at the next turn that the trainer later scores. Nothing the model wrote is re-tokenized.

Everything that can go wrong with a call (unreadable block, unknown tool, too many calls, the tool raising or
timing out) is answered to the model as an error text and counted, never raised.

Images (a vision-language model's folder, through its processor): the row's images (``multi_modal_data["image"]``)
go with every engine request as ``image_data``; a tool may return images (``ToolResponse.image``), which enter the
tool turn as the model's image tokens (expanded to each image's grid, as the dataset expands a prompt's) and join
the trajectory's images, so the next request carries all of them. The trajectory returns them in
``AgentLoopOutput.multi_modal_data``; the manager turns them into the batch's ``multi_modal_inputs`` (vision.py).
A row's videos (Qwen2-VL / Qwen2.5-VL) go the same way as ``video_data``; a tool's video (``ToolResponse.video``) is
refused.
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
from verl.workers.rollout.agent_loop.tool_formats import get_tool_parser
from verl.workers.rollout.agent_loop.tool_parser import FunctionCall
from verl.workers.rollout.agent_loop.vision import VisionChat

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
    vision: VisionChat | None = None  # set by init_class from the model's processor

    @classmethod
    def init_class(cls, config, tokenizer, processor=None, **kwargs: Any) -> None:
        multi_turn = config.config.actor_rollout_ref.rollout.multi_turn
        cls.tools, cls.tool_schemas = load_tools(multi_turn.tool_config_path,
                                                 getattr(multi_turn, "function_tool_path", None))
        cls.interactions = load_interactions(multi_turn.interaction_config_path)
        # data.apply_chat_template_kwargs, sent by the trainer with the batch (agent_loop.base.with_template_kwargs)
        data = getattr(config.config, "data", None)
        cls.renderer = ChatRenderer(tokenizer, multi_turn.chat_template,
                                    "actor_rollout_ref.rollout.multi_turn.chat_template",
                                    dict(getattr(data, "apply_chat_template_kwargs", None) or {}))
        cls.parser = get_tool_parser(multi_turn.format, cls.tool_schemas)  # multi_turn.format: hermes, qwen3_coder, ...
        cls.multi_turn = multi_turn
        # images need the model's processor; a text model's loop keeps its text-only path
        cls.vision = VisionChat(processor) if getattr(processor, "image_processor", None) is not None else None

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = _messages(kwargs)
        extra_info = kwargs.get("extra_info") or {}
        tools_kwargs = kwargs.get("tools_kwargs") or extra_info.get("tools_kwargs") or {}
        interaction, interaction_kwargs = self._interaction(kwargs, extra_info)
        state = _Trajectory(uuid.uuid4().hex)
        state.images = list((kwargs.get("multi_modal_data") or {}).get("image") or [])
        state.videos = list((kwargs.get("multi_modal_data") or {}).get("video") or [])
        messages, prompt_ids = self._prompt(messages, state.images, kwargs, state.videos)
        if interaction is not None:
            await interaction.start_interaction(state.request_id, **interaction_kwargs)
        try:
            await self._turns(state, prompt_ids, messages, sampling_params, tools_kwargs, interaction,
                              interaction_kwargs)
        finally:
            await self._release(state, tools_kwargs)
            if interaction is not None:
                await interaction.finalize_interaction(state.request_id, **interaction_kwargs)
        ids = prompt_ids + state.response_ids
        sanity = self.renderer.check_tokens(self.vision.collapse(ids) if self.vision is not None else ids, messages,
                                            self.tool_schemas, self.multi_turn.tokenization_sanity_check_mode)
        return AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=state.response_ids, response_mask=state.mask,
            response_logprobs=state.log_probs if state.has_log_probs else None,
            routed_experts=_within(state.routed_experts, len(prompt_ids) + len(state.response_ids)),
            num_turns=len(messages), metrics=AgentLoopMetrics(state.generate_s, state.tool_s),
            extra_fields={"turn_scores": state.turn_scores, "tool_rewards": state.tool_rewards,
                          "__tool_calls__": state.tool_calls, "__tool_errors__": state.tool_errors,
                          "__tokenization_mismatch__": int(not sanity)},
            multi_modal_data={**({"image": list(state.images)} if state.images else {}),
                              **({"video": list(state.videos)} if state.videos else {})} or None)

    def _prompt(self, messages: list[dict], images: list, kwargs: dict,
                videos: list | None = None) -> tuple[list[dict], list[int]]:
        """(the messages as rendered, the prompt's ids): with a processor, the row's ``<image>`` / ``<video>``
        placeholders become the model's image / video text and each such token is expanded to its grid (the
        dataset's grid when the row carries its multi_modal_inputs)."""
        videos = videos or []
        if self.vision is None:
            if images or videos:
                raise ValueError("tool_agent: the row carries images (multi_modal_data) but the rollout has no "
                                 "multi-modal processor; actor_rollout_ref.model.path must be a vision-language model")
            return messages, self.renderer.prompt_ids(messages, self.tool_schemas)
        where = f"tool_agent row (index {kwargs.get('index')!r})"
        messages = self.vision.messages(messages, len(images), where, len(videos))
        grid = self.vision.grid(images, kwargs.get("multi_modal_inputs"))
        video_grid = self.vision.video_grid(videos, kwargs.get("multi_modal_inputs")) if videos else None
        return messages, self.vision.expand(self.renderer.prompt_ids(messages, self.tool_schemas), grid, where,
                                            video_grid)

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
            # every request carries all of the trajectory's images so far (the prompt's, then the tools'), and the
            # row's videos
            images = {"image_data": list(state.images)} if state.images else {}
            if state.videos:
                images["video_data"] = list(state.videos)
            out = await self.server_manager.generate(state.request_id, prompt_ids=prompt_ids + state.response_ids,
                                                     sampling_params={**sampling_params, "max_tokens": budget},
                                                     **images)
            state.generate_s += time.perf_counter() - start
            state.add(out.token_ids, 1, out.log_probs)
            # R3: each turn's request is the whole trajectory so far, so the latest turn's record covers it all
            state.routed_experts = getattr(out, "routed_experts", None)
            assistant_turns += 1
            text = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            # gpt-oss writes its calls in special tokens: its parser reads the turn with them
            raw = self.tokenizer.decode(out.token_ids) if self.parser.keep_special_tokens else text
            parsed = self.parser.parse(raw)
            messages.append({"role": "assistant", "content": text})
            if out.stop_reason == "length" or (cfg.max_assistant_turns and assistant_turns >= cfg.max_assistant_turns):
                return
            new_images: list = []
            if parsed.calls or parsed.errors:
                new_messages, new_images = await self._call_tools(state, parsed.calls, parsed.errors, tools_kwargs)
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
            if new_images:
                delta = self.vision.expand(delta, self.vision.grid(new_images), "tool_agent tool turn")
            messages.extend(new_messages)
            if len(state.response_ids) + len(delta) >= self.response_length:
                return  # no room left for the model to answer: end with its last own turn
            state.add(delta, 0, None)
            state.images += new_images

    @rollout_trace_op
    async def _call_tools(self, state: _Trajectory, calls: list[FunctionCall], errors: list[str],
                          tools_kwargs: dict) -> tuple[list[dict], list]:
        """One tool message per call (and per unreadable block), in the order written, and the images the calls
        returned, in the order of their messages."""
        limit = self.multi_turn.max_parallel_calls
        texts = [f"Error: {e}" for e in errors]
        over = calls[limit:]
        texts += [f"Error: at most {limit} tool call(s) per turn; {c.name} was not run" for c in over]
        start = time.perf_counter()
        results = await asyncio.gather(*[self._call_one(state, call, tools_kwargs) for call in calls[:limit]])
        state.tool_s += time.perf_counter() - start
        state.tool_calls += len(calls) + len(errors)
        state.tool_errors += len(errors) + len(over) + sum(1 for _, failed, _ in results if failed)
        side = self.multi_turn.tool_response_truncate_side
        answers = [(text, images) for text, _, images in results] + [(text, []) for text in texts]
        messages, new_images = [], []
        for text, images in answers:
            content = truncate_text(text, self.multi_turn.max_tool_response_length, side)
            if images:
                content = self.vision.tool_content(content, len(images))
                new_images += images
            messages.append({"role": "tool", "content": content})
        return messages, new_images

    async def _call_one(self, state: _Trajectory, call: FunctionCall, tools_kwargs: dict) -> tuple[str, bool, list]:
        """(the text for the model, whether the call failed, the images the tool returned as RGB PIL images)."""
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "none"
            return f"Error: unknown tool {call.name!r}; available tools: {known}", True, []
        per_tool = tools_kwargs.get(call.name) or {}
        timeout = float((getattr(tool, "config", None) or {}).get("tool_call_timeout", TOOL_CALL_TIMEOUT_S))
        try:
            instance_id = await self._instance(state, call.name, tool, per_tool)
            response, reward, _ = await asyncio.wait_for(
                tool.execute(instance_id, call.arguments, **(per_tool.get("execute_kwargs") or {})), timeout)
        except asyncio.TimeoutError:
            return f"Error: {call.name} did not answer within {timeout:g} s", True, []
        except Exception as err:  # noqa: BLE001 - a tool's failure is the model's information, not a crash
            logger.debug("tool %s raised", call.name, exc_info=True)
            return f"Error: {call.name} failed: {type(err).__name__}: {err}", True, []
        state.tool_rewards.append(float(reward or 0.0))
        text = getattr(response, "text", None)
        return (text if text is not None else ""), False, self._tool_images(call.name, response)

    def _tool_images(self, name: str, response: Any) -> list:
        """A tool's ToolResponse.image as RGB PIL images. Unlike the model's mistakes, media the rollout cannot
        take are the tool's or the setup's, so they stop the run with the tool named."""
        if getattr(response, "video", None):
            raise NotImplementedError(f"tool {name!r} returned ToolResponse.video; a tool's video is not built (a row's "
                                      "videos are, data.video_key); return the frames as ToolResponse.image")
        images = [image for image in (getattr(response, "image", None) or []) if image is not None]
        if not images:
            return []
        if self.vision is None:
            raise ValueError(f"tool {name!r} returned ToolResponse.image, but the rollout model has no multi-modal "
                             "processor; use a vision-language model (Qwen2-VL / Qwen2.5-VL) for tools that return "
                             "images")
        return self.vision.load(images, f"tool {name!r} ToolResponse.image")

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
        self.images: list = []  # the row's, then each tool's, in the order of their image tokens
        self.videos: list = []  # the row's ((frames, metadata) pairs), in the order of their video tokens
        self.routed_experts = None  # R3: the last turn's engine record (prompt + response so far)

    def add(self, ids: list[int], mask_value: int, log_probs: list[float] | None) -> None:
        self.response_ids += ids
        self.mask += [mask_value] * len(ids)
        if mask_value and log_probs is None:
            self.has_log_probs = False
        self.log_probs += list(log_probs) if log_probs is not None else [0.0] * len(ids)


def _within(routed, tokens: int):
    """The record cut to the trajectory's tokens (a response cut at response_length drops the rest)."""
    return routed[:tokens] if routed is not None else None


def _messages(kwargs: dict) -> list[dict]:
    raw = kwargs.get("raw_prompt")
    if raw is None:
        raise KeyError("tool_agent needs the row's chat messages: set data.return_raw_chat=true")
    return [dict(m) for m in list(raw)]


def load_tools(path: str | None, function_tool_path: str | None = None) -> tuple[dict[str, Any], list[dict]]:
    if not path and not function_tool_path:
        return {}, []
    from verl.tools.utils.tool_registry import load_all_tools

    tools = load_all_tools(path, function_tool_path)
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
