"""What an agent loop is: one coroutine per sample that talks to the engine in token ids and returns a trajectory.

Upstream's extension point, with its names: subclass ``AgentLoopBase``, implement ``async run(sampling_params,
**kwargs)`` (kwargs are the dataset row's fields), return an ``AgentLoopOutput``, and ``@register("name")`` the
class (or list it in ``rollout.agent.agent_loop_config_path``). The row's ``agent_name`` column picks the loop.

``response_ids`` hold everything after the prompt: the model's tokens and the tool / user turns spliced in
between them; ``response_mask`` is 1 on the model's tokens only, so only they are trained on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AgentLoopBase", "AgentLoopOutput", "AgentLoopMetrics", "TrainerConfigView"]


@dataclass
class AgentLoopMetrics:
    """Per-trajectory timings (seconds), as upstream reports them."""

    generate_sequences: float = 0.0
    tool_calls: float = 0.0


@dataclass
class AgentLoopOutput:
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]  # 1 = a model token (trained), 0 = a tool or user token
    response_logprobs: list[float] | None = None  # the engine's log-probs, 0.0 at tool/user tokens
    num_turns: int = 0  # user + assistant + tool turns, the prompt's included
    reward_score: float | None = None  # set: used instead of calling the reward function for this sample
    metrics: AgentLoopMetrics | dict[str, Any] = field(default_factory=AgentLoopMetrics)
    extra_fields: dict[str, Any] = field(default_factory=dict)  # per-sample values, kept as non-tensor columns
    # {"image": [...]}: the row's images first, then any a tool returned, in the order of their image tokens; the
    # manager turns them into the row's multi_modal_inputs for the actor (vision.py)
    multi_modal_data: dict[str, Any] | None = None
    # R3: (tokens, moe_layers, top_k) over prompt_ids + response_ids from the start (the engine's routed_experts, a
    # tensor or an array; may stop short, e.g. before tool tokens spliced in after the last turn); outputs_to_batch
    # aligns it with input_ids
    routed_experts: Any = None

    def check(self, where: str) -> None:
        if len(self.response_mask) != len(self.response_ids):
            raise ValueError(f"{where}: response_mask has {len(self.response_mask)} entries for "
                             f"{len(self.response_ids)} response_ids; they must match one to one")
        if self.response_logprobs is not None and len(self.response_logprobs) != len(self.response_ids):
            raise ValueError(f"{where}: response_logprobs has {len(self.response_logprobs)} entries for "
                             f"{len(self.response_ids)} response_ids")
        if not self.prompt_ids:
            raise ValueError(f"{where}: prompt_ids is empty")
        routed = self.routed_experts
        if routed is not None and (len(routed.shape) != 3
                                   or routed.shape[0] > len(self.prompt_ids) + len(self.response_ids)):
            raise ValueError(f"{where}: routed_experts {tuple(routed.shape)} must be (tokens, moe_layers, top_k) over "
                             f"at most the {len(self.prompt_ids) + len(self.response_ids)} prompt + response tokens")


# the generation batch's meta_info key carrying data.apply_chat_template_kwargs to the rollout workers, which
# hold no data section of their own
TEMPLATE_KWARGS_META_KEY = "apply_chat_template_kwargs"


def with_template_kwargs(meta: dict[str, Any], data: Any) -> dict[str, Any]:
    """``meta`` plus the data section's apply_chat_template_kwargs (when any), for the agent loop's renders."""
    kwargs = dict(getattr(data, "apply_chat_template_kwargs", None) or {})
    return {**meta, TEMPLATE_KWARGS_META_KEY: kwargs} if kwargs else meta


# the generation batch's meta_info key carrying the trainer's project / experiment names for rollout traces
TRACE_META_KEY = "rollout_trace"


def with_trace_names(meta: dict[str, Any], config: Any) -> dict[str, Any]:
    """``meta`` plus rollout.trace.project_name / experiment_name (the trainer's where unset) when rollout.trace is
    on: the traces' project and experiment."""
    trace = getattr(config.actor_rollout_ref.rollout, "trace", None)
    if trace is None or trace.backend is None:
        return meta
    names = {"project_name": getattr(trace, "project_name", None) or config.trainer.project_name,
             "experiment_name": getattr(trace, "experiment_name", None) or config.trainer.experiment_name}
    return {**meta, TRACE_META_KEY: names}


class TrainerConfigView:
    """What upstream hands a loop as ``trainer_config``: ``.config.actor_rollout_ref`` is the typed
    ActorRolloutRefConfig; ``.config.data`` holds only ``apply_chat_template_kwargs``, which the trainer sends with
    each generation batch (the rollout worker holds no other section)."""

    def __init__(self, actor_rollout_ref: Any) -> None:
        self.config = _Sections(actor_rollout_ref)


class _Sections:
    def __init__(self, actor_rollout_ref: Any) -> None:
        self.actor_rollout_ref = actor_rollout_ref
        self.data = _DataView()


class _DataView:
    def __init__(self) -> None:
        self.apply_chat_template_kwargs: dict[str, Any] = {}


class AgentLoopBase(ABC):
    """``trainer_config.config.actor_rollout_ref`` is the worker's config; ``server_manager.generate(...)`` is the
    engine; ``tokenizer`` the policy's. Extra keyword arguments come from the loop's YAML entry."""

    def __init__(self, trainer_config: TrainerConfigView, server_manager: Any, tokenizer: Any, processor: Any = None,
                 **kwargs: Any) -> None:
        self.config = trainer_config.config
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.processor = processor
        self.rollout_config = trainer_config.config.actor_rollout_ref.rollout
        self.prompt_length = self.rollout_config.prompt_length
        self.response_length = self.rollout_config.response_length

    @classmethod
    def init_class(cls, config: TrainerConfigView, tokenizer: Any, processor: Any = None, **kwargs: Any) -> None:
        """One-time setup shared by every instance of the class (tools, interactions): the agent-loop manager calls
        it once, before the first instance, with the loop's YAML kwargs."""
        return None

    @abstractmethod
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """One trajectory for one dataset row (kwargs: its fields, e.g. raw_prompt, extra_info, tools_kwargs)."""
