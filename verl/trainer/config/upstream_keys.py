"""Upstream keys with an obvious meaning here: folded into ours, or accepted with a one-line note of what they do.

- `actor.optim.clip_grad` / `critic.optim.clip_grad`: upstream's engine name for the role's `grad_clip` (the yaml
  makes it follow grad_clip, so setting either works; set to different values, optim.clip_grad wins over a
  grad_clip left at its default, and two explicit different values are refused).
- `actor.tau_pos` / `tau_neg`: upstream's spelling of `actor.policy_loss.tau_pos` / `tau_neg` (the yaml makes
  policy_loss follow the actor's; an explicit policy_loss value wins, with a note).
- `algorithm.adv_estimator=grpo|rloo` with `rollout.n=1`: accepted as upstream does; a group of one has no
  baseline, so each advantage is the response's own score (GRPO: divided by std 1), i.e. plain REINFORCE.
- `fsdp_config.use_orig_params` / `forward_prefetch` (FSDP1 options), `trainer.use_legacy_worker_impl=disable`,
  `trainer.use_v1=false`, the profilers' `relocate_results=true`: accepted, each with a note.
- `fsdp_config.{ulysses_sequence_parallel_size, entropy_from_logits_with_chunking, use_torch_compile,
  entropy_checkpointing, forward_only}`: the role keys of the same names (verl.trainer.config.engine_mirror).
- `actor.tis_imp_ratio_cap` > 0 (truncated IS, verl.algos.tis): needs rollout.calculate_log_probs, the vanilla
  loss, and no rollout_correction.rollout_is beside it (verl.trainer.config.tis_checks).
- `rollout.cudagraph_capture_sizes`: needs enforce_eager=false (verl.trainer.config.cudagraph_checks).
- `critic.enable`: null (the estimator decides) or agreeing with it; a contradiction is refused
  (verl.trainer.config.critic_enable).
- `model.use_shm` with several nodes: refused, the copy is made on the driver's node only.
- `rollout.update_weights_bucket_megabytes`: accepted with a note when changed (an SGLang request size).
- `rollout.layered_summon`: accepted with a note; the weight sync streams parameter by parameter, in buckets
  of `rollout.checkpoint_engine.update_weights_bucket_megabytes`.
- `model.lora_adapter_path` with `lora_rank: 0` (the actor's, and `critic.model`'s): as upstream, the adapter
  decides: its `r`, `lora_alpha` and `target_modules` (adapter_config.json) become the model section's, with a
  note; an unreadable folder is refused.
"""

from __future__ import annotations

import warnings
from typing import Any

from omegaconf import OmegaConf, open_dict, read_write

from verl.trainer.config.critic_enable import critic_enable_problems
from verl.trainer.config.cudagraph_checks import cudagraph_problems
from verl.trainer.config.engine_mirror import apply_engine_mirrors
from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.trainer.config.tis_checks import tis_problems
from verl.utils.config_errors import ConfigWarning
from verl.utils.profiler.config import RELOCATE_NOTE

ARR = "actor_rollout_ref"
# Group estimators whose group of one is defined upstream (no baseline: the score itself); the others stay refused.
SINGLETON_GROUP_ESTIMATORS = ("grpo", "rloo", "rloo_vectorized")
_DEFAULT_GRAD_CLIP = 1.0
_DEFAULT_TAU = {"tau_pos": 1.0, "tau_neg": 1.05}


def apply_upstream_keys(cfg: PPOTrainerConfig) -> tuple[dict[str, Any], list[str]]:
    """Fold upstream's spellings into ours (in place) and note the accepted no-op keys.

    Returns ({dotted key: new value} to write back into the composed config, problems).
    """
    writes: dict[str, Any] = {}
    problems: list[str] = []
    _clip_grad(cfg, writes, problems)
    _tau(cfg, writes)
    apply_engine_mirrors(cfg, writes, problems, _note)
    problems += tis_problems(cfg) + cudagraph_problems(cfg) + critic_enable_problems(cfg)
    _notes(cfg)
    if cfg.actor_rollout_ref.model.use_shm and cfg.trainer.nnodes > 1:
        problems.append(f"{ARR}.model.use_shm=true copies the model to /dev/shm on the driver's node only, but "
                        f"trainer.nnodes={cfg.trainer.nnodes}; set {ARR}.model.use_shm=false on several nodes.")
    return writes, problems


def _clip_grad(cfg: PPOTrainerConfig, writes: dict[str, Any], problems: list[str]) -> None:
    for prefix, role in ((f"{ARR}.actor", cfg.actor_rollout_ref.actor), ("critic", cfg.critic)):
        clip_grad, grad_clip = role.optim.clip_grad, role.grad_clip
        if clip_grad == grad_clip:
            continue
        if grad_clip != _DEFAULT_GRAD_CLIP:
            problems.append(f"{prefix}.optim.clip_grad={clip_grad} and {prefix}.grad_clip={grad_clip} are the same "
                            f"setting (upstream's engine name and its worker name); give one.")
            continue
        role.grad_clip = clip_grad  # the workers clip by grad_clip
        writes[f"{prefix}.grad_clip"] = clip_grad


def adopt_adapter_rank(node: Any) -> tuple[dict[str, Any], list[str]]:
    """`model.lora_adapter_path` with `lora_rank: 0` (actor_rollout_ref.model, critic.model): the adapter's r /
    lora_alpha / target_modules, written into the composed config ``node`` before it is typed (the typed model
    section is frozen). Returns (writes, problems) as apply_upstream_keys does."""
    writes: dict[str, Any] = {}
    problems: list[str] = []
    for key, model in ((f"{ARR}.model", node.get(ARR, {}).get("model", {})),
                       ("critic.model", node.get("critic", {}).get("model", {}))):
        found, problem = _adapter_rank(key, model)
        writes |= found
        problems += problem
    if writes:
        with read_write(node), open_dict(node):
            for dotted, value in writes.items():
                OmegaConf.update(node, dotted, value, merge=False)
    return writes, problems


def _adapter_rank(key: str, model: Any) -> tuple[dict[str, Any], list[str]]:
    path, rank = model.get("lora_adapter_path"), model.get("lora_rank", 0)
    if not path or not isinstance(rank, int) or rank > 0:
        return {}, []
    from verl.models.lora import check_adapter_folder, read_adapter_config

    try:
        saved = read_adapter_config(check_adapter_folder(path, f"{key}.lora_adapter_path"))
        adopted = {"lora_rank": int(saved["r"]), "lora_alpha": saved["lora_alpha"]}
    except (OSError, ValueError, KeyError, TypeError) as err:
        return {}, [f"{key}.lora_adapter_path is set with {key}.lora_rank=0, so the rank is read from the adapter, "
                    f"which failed: {err}. Point it at a peft adapter folder, or set lora_rank."]
    targets = saved.get("target_modules")
    if targets:  # peft writes a list of module names (or one name / regex string)
        adopted["target_modules"] = sorted(targets) if isinstance(targets, list) else targets
    _note(f"{key}.lora_adapter_path={path!r} with lora_rank=0: LoRA with the adapter's own r={adopted['lora_rank']}, "
          f"lora_alpha={adopted['lora_alpha']}, target_modules={adopted.get('target_modules', model.get('target_modules'))}"
          ", as upstream (training continues from the adapter).")
    return {f"{key}.{name}": value for name, value in adopted.items()}, []


def _tau(cfg: PPOTrainerConfig, writes: dict[str, Any]) -> None:
    actor = cfg.actor_rollout_ref.actor
    for name, default in _DEFAULT_TAU.items():
        upstream, ours = getattr(actor, name), getattr(actor.policy_loss, name)
        if upstream == ours:
            continue
        if upstream != default:
            _note(f"{ARR}.actor.{name}={upstream} and {ARR}.actor.policy_loss.{name}={ours} are both set: the "
                  f"policy_loss value is used.")
        setattr(actor, name, ours)
        writes[f"{ARR}.actor.{name}"] = ours


def _notes(cfg: PPOTrainerConfig) -> None:
    arr = cfg.actor_rollout_ref
    estimator = cfg.algorithm.adv_estimator
    if estimator in SINGLETON_GROUP_ESTIMATORS and arr.rollout.n == 1:
        _note(f"algorithm.adv_estimator={estimator} with {ARR}.rollout.n=1: a group of one has no baseline, so each "
              "response's advantage is its own score (no mean subtracted, std 1), as upstream: plain REINFORCE.")
    sections = [(f"{ARR}.actor", arr.actor.fsdp_config), (f"{ARR}.ref", arr.ref.fsdp_config)]
    if cfg.use_critic:
        sections.append(("critic.model", cfg.critic.model.fsdp_config))
    if cfg.reward_model.enable:
        sections.append(("reward_model.model", cfg.reward_model.model.fsdp_config))
    for prefix, fsdp in sections:
        if fsdp.use_orig_params:
            _note(f"{prefix}.fsdp_config.use_orig_params=true is an FSDP1 option: FSDP2 (used here for fsdp and "
                  "fsdp2) always shards the original parameters, so it changes nothing.")
        if fsdp.forward_prefetch:
            _note(f"{prefix}.fsdp_config.forward_prefetch=true is an FSDP1 option (upstream ignores it under fsdp2): "
                  "FSDP2, used here, prefetches the next layer's parameters by itself.")
    if arr.rollout.update_weights_bucket_megabytes != 512:
        _note(f"{ARR}.rollout.update_weights_bucket_megabytes={arr.rollout.update_weights_bucket_megabytes}: upstream "
              "sizes SGLang's weight-update requests with it; the engines here take the weights in process, "
              "parameter by parameter, so there is no request to size.")
    if arr.rollout.layered_summon:
        _note(f"{ARR}.rollout.layered_summon=true: the weight sync to the rollout engine already gathers the FSDP "
              "shards parameter by parameter, in buckets of at most "
              f"{ARR}.rollout.checkpoint_engine.update_weights_bucket_megabytes, never the whole model at once "
              "unless it fits one bucket, so the peak memory it saves upstream is bounded here with or without it.")
    if cfg.trainer.use_legacy_worker_impl == "disable":
        _note("trainer.use_legacy_worker_impl=disable selects upstream's engine-based workers; this build has one "
              "worker implementation (verl/workers/fsdp_workers.py, FSDP2), which runs for every value.")
    relocating = [key for key, on in (("global_profiler", cfg.global_profiler.relocate_results),
                                      (f"{ARR}.actor.profiler", arr.actor.profiler.relocate_results),
                                      (f"{ARR}.rollout.profiler", arr.rollout.profiler.relocate_results),
                                      (f"{ARR}.ref.profiler", arr.ref.profiler.relocate_results),
                                      ("critic.profiler", cfg.critic.profiler.relocate_results)) if on]
    if relocating:
        _note(f"{relocating[0]}.relocate_results=true: upstream {RELOCATE_NOTE}, so there is nothing to move.")
    if not cfg.trainer.use_v1:
        _note("trainer.use_v1=false selects upstream's older trainer loop instead of its v1 trainer; this build has "
              "one trainer (synchronous, colocated: generate, then update, each step), which runs for either value.")


def _note(message: str) -> None:
    warnings.warn(message, ConfigWarning, stacklevel=4)
