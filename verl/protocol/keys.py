"""The DataProto batch keys of one PPO/GRPO step, as code: name, dtype, symbolic shape, producer, condition.

The table describes the batch as it reaches ``update_actor`` (the end of ``RayPPOTrainer.train_step``), plus the
keys a stage produces and the trainer consumes before then (``final=False``). Project rule: every key has
exactly one producer; a stage that needs a new key adds it here.

Shapes use four symbols: ``batch`` (rows: prompts x rollout.n), ``prompt_length`` (data.max_prompt_length),
``response_length`` (the rollout's response width) and ``sequence_length`` (= prompt_length + response_length).

Keys that are not known ahead:
- the reward function's extra fields: every key of a dict returned by compute_score (``score``, ``acc``, ...)
  becomes a non-tensor key of its own, written by ``RayPPOTrainer._compute_advantage`` (with
  algorithm.filter_groups already when each generation round is scored: verl.trainer.ppo.dynamic_sampling);
- dataset columns beyond verl's parquet format are carried along untouched.
Pass such names to ``check_batch(..., allow=...)``.

``meta_info`` (not per row) is not in this table: ``temperature``, ``micro_batch_size``, ``use_dynamic_bsz``,
``max_token_len``, ``eos_token_id``, ``pad_token_id``, ``do_sample``, ``validate``, ``global_steps`` are set by
the caller of the call that reads them; workers return ``metrics`` and ``timing``; ``reward_extra_keys`` names
the extra fields a dynamic-sampling round attached (verl.trainer.ppo.dynamic_sampling.attach_reward).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from verl.protocol import DataProto

__all__ = ["BATCH_KEYS", "Condition", "KeySpec", "check_batch", "expected_keys"]


@dataclass(frozen=True)
class Condition:
    """When a key exists: ``text`` for people, ``test`` on the typed PPOTrainerConfig for code."""

    text: str
    test: Callable[[Any], bool]

    def holds(self, config: Any) -> bool:
        return bool(self.test(config))


# Conditions read the typed config's attributes (verl.trainer.config.PPOTrainerConfig); this module only sees them
# as ``Any`` because verl.protocol sits below verl.trainer.
CRITIC = Condition("a critic: algorithm.adv_estimator=gae", lambda c: c.use_critic)
REFERENCE = Condition("a reference policy: algorithm.use_kl_in_reward or actor_rollout_ref.actor.use_kl_loss",
                      lambda c: c.use_reference_policy)
REMAX = Condition("algorithm.adv_estimator=remax", lambda c: c.algorithm.adv_estimator == "remax")
ROLLOUT_LOG_PROBS = Condition("actor_rollout_ref.rollout.calculate_log_probs=true",
                              lambda c: c.actor_rollout_ref.rollout.calculate_log_probs)
RAW_CHAT = Condition("data.return_raw_chat=true", lambda c: c.data.return_raw_chat)
FULL_PROMPT = Condition("data.return_full_prompt=true", lambda c: c.data.return_full_prompt)
AGENT_LOOP = Condition("actor_rollout_ref.rollout.mode=async", lambda c: c.actor_rollout_ref.rollout.mode == "async")
# verl.trainer.config.old_log_prob_reuse decides it: one epoch and one mini-batch, nothing reads them before the update
OLD_LOG_PROB_PASS = Condition("the actor's old-log-prob pass runs, or rollout_correction.bypass_mode: not when the "
                              "update's first forward stands in for it (config.old_log_prob_reuse)",
                              lambda c: not c.old_log_prob_reuse.reuse)
# R3: the rollout records it; R2: the old-log-prob pass does, when it runs (config.old_log_prob_reuse)
ROUTER_REPLAY = Condition(
    "actor_rollout_ref.actor.router_replay.mode=R3, or R2 with the old-log-prob pass",
    lambda c: c.actor_rollout_ref.actor.router_replay.mode == "R3"
    or (c.actor_rollout_ref.actor.router_replay.mode == "R2" and not c.old_log_prob_reuse.reuse))
TOOL_AGENT = Condition("actor_rollout_ref.rollout.multi_turn.enable=true (rows of the tool agent)",
                       lambda c: c.actor_rollout_ref.rollout.multi_turn.enable)


@dataclass(frozen=True)
class KeySpec:
    """One batch key. ``producer`` is ``module:qualname`` of the one function whose output carries the key.

    ``optional``: a column of the data (present when the parquet file has it), or a field no typed key alone decides
    (``reward_timeout``: whichever reward manager scores, built-in or the user's), so it is allowed, never required.
    ``final``: still in the batch at the actor update (False for keys the trainer pops for metrics).
    """

    name: str
    tensor: bool
    dtype: torch.dtype | np.dtype
    shape: tuple[str, ...]
    producer: str
    meaning: str
    when: Condition | None = None
    optional: bool = False
    final: bool = True

    def present_for(self, config: Any) -> bool:
        """Whether the key must be in the batch at the actor update for ``config`` (optional keys: False)."""
        if not self.final or self.optional:
            return False
        return self.when is None or self.when.holds(config)

    def allowed_for(self, config: Any) -> bool:
        """Whether the key may be in the batch at the actor update for ``config``."""
        return self.optional or self.present_for(config)


_OBJECT = np.dtype(object)
_ROWS = ("batch",)
_RESP = ("batch", "response_length")
_SEQ = ("batch", "sequence_length")

_ROLLOUT = "verl.workers.rollout.base:BaseRollout.generate_sequences"
_DATASET = "verl.data.rl_dataset:RLHFDataset.__getitem__"
_TRAINER = "verl.trainer.ppo.ray_trainer:RayPPOTrainer"
_AGENT_OUT = "verl.workers.rollout.agent_loop.outputs:outputs_to_batch"


def _specs() -> list[KeySpec]:
    t, o = True, False  # tensor / object array
    long, f32 = torch.int64, torch.float32
    return [
        # -- rollout (HFRollout, vLLMRollout): its output replaces the dataset's prompt-only tensors -------------
        KeySpec("prompts", t, long, ("batch", "prompt_length"), _ROLLOUT,
                "the left-padded prompt ids the rollout was given"),
        KeySpec("responses", t, long, _RESP, _ROLLOUT, "response ids, right-padded with pad_token_id after EOS"),
        KeySpec("input_ids", t, long, _SEQ, _ROLLOUT,
                "prompts + responses (the dataset's prompt-only input_ids are popped by RayPPOTrainer._generate)"),
        KeySpec("attention_mask", t, long, _SEQ, _ROLLOUT, "prompt mask + response_mask"),
        KeySpec("position_ids", t, long, _SEQ, _ROLLOUT, "positions from attention_mask (0 on left padding)"),
        KeySpec("response_mask", t, long, _RESP, _ROLLOUT, "1 on real response tokens (through EOS), 0 on padding "
                "and, from the agent loop, on tool and user tokens inside the response (only 1s are trained on)"),
        KeySpec("rollout_log_probs", t, f32, _RESP, _ROLLOUT,
                "the engine's log-prob of each sampled token, 0 beyond response_mask", when=ROLLOUT_LOG_PROBS),
        # -- the agent loop (rollout.mode=async) adds, per row ------------------------------------------------------
        KeySpec("rm_scores", t, f32, _RESP, _AGENT_OUT, "AgentLoopOutput.reward_score on the last model token; "
                "the reward function is not called for those rows. With reward_model.enable=true the reward-model "
                "worker (verl.workers.reward_model_worker:RewardModelWorker.compute_rm_score) scores the rows the "
                "agent loop did not, merged by verl.trainer.ppo.reward_model_stage:add_rm_scores",
                when=AGENT_LOOP, optional=True),
        KeySpec("__rm_scored__", o, _OBJECT, _ROWS, _AGENT_OUT, "which rows carry an agent-loop score; "
                "verl.trainer.ppo.reward.compute_reward pops it", when=AGENT_LOOP, final=False),
        KeySpec("__num_turns__", o, _OBJECT, _ROWS, _AGENT_OUT, "turns per sample; popped into agent/num_turns",
                when=AGENT_LOOP, final=False),
        KeySpec("__tool_calls__", o, _OBJECT, _ROWS, _AGENT_OUT, "tool calls per sample; popped into "
                "agent/tool_calls", when=TOOL_AGENT, final=False),
        KeySpec("__tool_errors__", o, _OBJECT, _ROWS, _AGENT_OUT, "failed tool calls per sample; popped into "
                "agent/tool_errors", when=TOOL_AGENT, final=False),
        KeySpec("__tokenization_mismatch__", o, _OBJECT, _ROWS, _AGENT_OUT, "1 where the tokenization check failed; "
                "popped into agent/tokenization_mismatch", when=TOOL_AGENT, final=False),
        KeySpec("__aborted__", o, _OBJECT, _ROWS, _AGENT_OUT, "True where rollout.over_sample_rate dropped the row "
                "(empty response); popped into agent/aborted_ratio", when=AGENT_LOOP, optional=True, final=False),
        KeySpec("turn_scores", o, _OBJECT, _ROWS, _AGENT_OUT, "the interaction's score of each user turn (list)",
                when=TOOL_AGENT, optional=True),
        KeySpec("tool_rewards", o, _OBJECT, _ROWS, _AGENT_OUT, "each tool call's step reward (list)",
                when=TOOL_AGENT, optional=True),
        KeySpec("routed_experts", t, torch.int16, ("batch", "sequence_length", "moe_layers", "top_k"),
                "verl.models.router_replay:RouterReplay.take_record", "each token's MoE top-k experts, one slot per MoE "
                "layer, -1 where none was recorded; recorded by the hf rollout (R3) or the actor's old-log-prob pass "
                "(R2: ActorRolloutRefWorker.compute_log_prob), replayed by the update", when=ROUTER_REPLAY),
        # -- log-probs and values ---------------------------------------------------------------------------------
        KeySpec("old_log_probs", t, f32, _RESP, "verl.workers.fsdp_workers:ActorRolloutRefWorker.compute_log_prob",
                "log-prob of each response token under the policy before this step's update", when=OLD_LOG_PROB_PASS),
        KeySpec("entropys", t, f32, _RESP, "verl.workers.fsdp_workers:ActorRolloutRefWorker.compute_log_prob",
                "per-token entropy; RayPPOTrainer._add_old_log_prob pops it into actor/entropy", final=False),
        KeySpec("ref_log_prob", t, f32, _RESP, "verl.workers.fsdp_workers:ActorRolloutRefWorker.compute_ref_log_prob",
                "log-prob of each response token under the frozen reference policy", when=REFERENCE),
        KeySpec("values", t, f32, _RESP, "verl.workers.fsdp_workers:CriticWorker.compute_values",
                "the critic's value of each response position, 0 beyond response_mask", when=CRITIC),
        # -- reward and advantages --------------------------------------------------------------------------------
        KeySpec("token_level_scores", t, f32, _RESP, "verl.trainer.ppo.reward:compute_reward",
                "the reward manager's score, on each row's last response token"),
        KeySpec("reward_timeout", o, _OBJECT, _ROWS,
                "verl.workers.reward_manager.timed_scoring:timed_extra_info",
                "True where the row's compute_score ran past reward_model.scoring.timeout (scored 0); on every row "
                "while a built-in reward manager scores under a time limit, so it is not required", optional=True),
        KeySpec("reward_baselines", t, f32, _ROWS, f"{_TRAINER}._add_remax_baseline",
                "ReMax: the summed reward of the greedy response to the same prompt", when=REMAX),
        KeySpec("token_level_rewards", t, f32, _RESP, f"{_TRAINER}._compute_advantage",
                "token_level_scores minus beta * KL(actor || ref) with algorithm.use_kl_in_reward "
                "(verl.algos.batch.apply_kl_penalty), else the scores themselves"),
        KeySpec("advantages", t, f32, _RESP, "verl.algos.batch:compute_advantage",
                "the registered algorithm.adv_estimator's advantage per response token"),
        KeySpec("returns", t, f32, _RESP, "verl.algos.batch:compute_advantage",
                "the estimator's return per response token (the critic's target under GAE)"),
        # -- dataset (RLHFDataset + collate_fn): one object per row ----------------------------------------------
        KeySpec("raw_prompt_ids", o, _OBJECT, _ROWS, _DATASET, "the prompt's token ids, unpadded (list[int])"),
        KeySpec("index", o, _OBJECT, _ROWS, _DATASET, "extra_info.index of the row, else its position in the data"),
        KeySpec("raw_prompt", o, _OBJECT, _ROWS, _DATASET, "the prompt's chat messages", when=RAW_CHAT),
        KeySpec("full_prompts", o, _OBJECT, _ROWS, _DATASET, "the chat-templated prompt text", when=FULL_PROMPT),
        KeySpec("data_source", o, _OBJECT, _ROWS, _DATASET,
                "the column of that name; picks the scoring rule (data.reward_fn_key)", optional=True),
        KeySpec("ability", o, _OBJECT, _ROWS, _DATASET, "the column of that name (e.g. 'math')", optional=True),
        KeySpec("reward_model", o, _OBJECT, _ROWS, _DATASET,
                "the column of that name: {style, ground_truth}", optional=True),
        KeySpec("extra_info", o, _OBJECT, _ROWS, _DATASET,
                "the column of that name: {index, split, ...}, handed to compute_score", optional=True),
        # -- trainer ----------------------------------------------------------------------------------------------
        KeySpec("uid", o, _OBJECT, _ROWS, f"{_TRAINER}._new_batch",
                "one id per prompt, shared by its rollout.n responses (the group of GRPO/RLOO/...)"),
    ]


BATCH_KEYS: Mapping[str, KeySpec] = MappingProxyType({spec.name: spec for spec in _specs()})


def expected_keys(config: Any) -> set[str]:
    """The keys a step's batch holds at the actor update for ``config`` (a PPOTrainerConfig), besides
    optional data columns and reward extra fields."""
    return {name for name, spec in BATCH_KEYS.items() if spec.present_for(config)}


def check_batch(batch: DataProto, config: Any, allow: Iterable[str] = ()) -> list[str]:
    """Problems with ``batch`` as the actor update's input for ``config``; empty when it matches the table.

    Reports missing keys, keys outside the table (unless named in ``allow``: reward extra fields, extra dataset
    columns, which must then be object arrays), keys the config should not produce, a tensor stored as an object
    array or the reverse, the wrong dtype or rank, and a shape symbol bound to two sizes.
    """
    allow = set(allow)
    tensors = {} if batch.batch is None else {k: batch.batch[k] for k in batch.batch.keys()}
    objects = dict(batch.non_tensor_batch)
    problems: list[str] = []
    for name in sorted(expected_keys(config) - tensors.keys() - objects.keys()):
        spec = BATCH_KEYS[name]
        problems.append(f"{name}: missing; produced by {spec.producer}"
                        + (f" when {spec.when.text}" if spec.when else ""))
    sizes: dict[str, tuple[int, str]] = {}
    for name, value in sorted({**objects, **tensors}.items()):
        is_tensor = name in tensors
        spec = BATCH_KEYS.get(name)
        if spec is None:
            if name not in allow:
                problems.append(f"{name}: not in verl.protocol.keys.BATCH_KEYS; add it there with its producer")
            elif is_tensor:
                problems.append(f"{name}: allowed extras are per-row objects, but it is a tensor")
            continue
        if not spec.final:
            problems.append(f"{name}: present at the actor update, but it is consumed before then ({spec.meaning})")
        elif not spec.allowed_for(config):
            problems.append(f"{name}: present, but expected only with {spec.when.text} (produced by {spec.producer})")
        problems.extend(_check_value(spec, value, is_tensor, sizes))
    problems.extend(_check_symbols(sizes))
    return problems


def _check_value(spec: KeySpec, value: Any, is_tensor: bool, sizes: dict[str, tuple[int, str]]) -> list[str]:
    if is_tensor != spec.tensor:
        where = "batch (tensor)" if is_tensor else "non_tensor_batch (object array)"
        want = "a tensor" if spec.tensor else "an object array"
        return [f"{spec.name}: stored in {where}, but the table says {want}"]
    problems = []
    if value.dtype != spec.dtype:
        problems.append(f"{spec.name}: dtype {value.dtype}, expected {spec.dtype}")
    if value.ndim != len(spec.shape):
        problems.append(f"{spec.name}: rank {value.ndim} {tuple(value.shape)}, expected {spec.shape}")
        return problems
    for symbol, size in zip(spec.shape, value.shape):
        seen = sizes.setdefault(symbol, (int(size), spec.name))
        if seen[0] != size:
            problems.append(f"{spec.name}: {symbol}={size}, but {seen[1]} has {symbol}={seen[0]}")
    return problems


def _check_symbols(sizes: dict[str, tuple[int, str]]) -> list[str]:
    if not {"prompt_length", "response_length", "sequence_length"} <= sizes.keys():
        return []
    (prompt, _), (response, _), (sequence, owner) = (sizes[k] for k in
                                                     ("prompt_length", "response_length", "sequence_length"))
    if sequence != prompt + response:
        return [f"{owner}: sequence_length={sequence}, expected prompt_length + response_length = "
                f"{prompt} + {response}"]
    return []
