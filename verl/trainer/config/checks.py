"""Checks that need more than one key: batch-size arithmetic, resources, algorithm choices.

Each check returns messages (and warns for what will run but probably not as meant). The batch-size
rules are upstream verl's, stated here once so the workers never find out mid-run:
  - each step's data.train_batch_size * rollout.n responses split into whole optimizer steps of
    ppo_mini_batch_size * rollout.n;
  - each optimizer step's responses split evenly over the data-parallel workers
    (nnodes * n_gpus_per_node / ulysses_sequence_parallel_size);
  - each worker's share splits into whole micro-batches of *_micro_batch_size_per_gpu.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from verl.trainer.config.algorithm import rollout_correction_problems
from verl.trainer.config.attention_checks import check_attn_implementation
from verl.trainer.config.engine_kwargs_checks import check_rollout_engine_kwargs
from verl.trainer.config.hsdp_checks import check_hsdp
from verl.trainer.config.lora_checks import check_lora
from verl.trainer.config.pad_to_length_checks import check_pad_to_length
from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.trainer.config.prefix_grouper_checks import check_prefix_grouper
from verl.trainer.config.profiler_checks import check_profiler
from verl.trainer.config.ref_model_checks import check_ref_model
from verl.trainer.config.reward import check_reward_model
from verl.trainer.config.rollout_service_checks import check_rollout_services
from verl.trainer.config.rollout_v07_checks import rollout_v07_problems
from verl.trainer.config.router_replay_checks import check_router_replay
from verl.trainer.config.tiled_mlp_checks import check_tiled_mlp
from verl.trainer.config.ulysses_checks import check_ulysses
from verl.trainer.config.upstream_keys import SINGLETON_GROUP_ESTIMATORS
from verl.utils.config_errors import ConfigWarning
from verl.utils.config_schema import Refusal
from verl.workers.config.registries import GROUP_ADV_ESTIMATORS

N = "actor_rollout_ref.rollout.n"

# Refusals that depend on another key, so no field marker can say them; docs/config.md lists them with the
# markers (verl.trainer.config.docs). (key, value refused, the condition, why and what to do)
CONDITIONAL_REFUSALS: tuple[tuple[str, str, str, Refusal], ...] = (
    (
        "actor_rollout_ref.rollout.ignore_eos",
        "true",
        "actor_rollout_ref.rollout.name=hf",
        Refusal(
            "HF generate stops each response at EOS; ignoring it is built for the vLLM rollout only",
            "Set ignore_eos=false, or use actor_rollout_ref.rollout.name=vllm.",
        ),
    ),
    *(
        (
            f"actor_rollout_ref.model.{key}",
            "a folder",
            "actor_rollout_ref.rollout.name=vllm",
            Refusal(
                f"the vLLM engine reads its {what} from actor_rollout_ref.model.path; handing it a separate {key} is "
                "built for the FSDP modules and the HF rollout only",
                f"Put the {what} in the model folder and leave {key} null, or use "
                "actor_rollout_ref.rollout.name=hf.",
            ),
        )
        for key, what in (("hf_config_path", "config.json"), ("tokenizer_path", "tokenizer"))
    ),
)


def run_checks(cfg: PPOTrainerConfig) -> list[str]:
    problems = check_resources(cfg)
    problems += check_actor_rollout_n(cfg)
    problems += check_actor_batches(cfg)
    problems += check_log_prob_batches(cfg)
    if cfg.use_critic:
        problems += check_critic_batches(cfg) + check_critic_loss_scale(cfg)
    problems += check_algorithm(cfg)
    problems += check_dynamic_sampling(cfg)
    problems += check_lengths(cfg)
    problems += check_trainer(cfg)
    problems += check_multi_turn(cfg)
    problems += check_conditional_refusals(cfg)
    problems += check_reward_model(cfg)
    problems += check_lora(cfg)
    problems += check_ref_model(cfg)
    problems += check_hsdp(cfg)
    problems += check_ulysses(cfg)
    problems += check_prefix_grouper(cfg)
    problems += check_pad_to_length(cfg)
    problems += check_attn_implementation(cfg)
    problems += check_rollout_skip(cfg)
    problems += check_rollout_trace(cfg)
    problems += check_rollout_engine_kwargs(cfg.actor_rollout_ref.rollout)
    problems += check_rollout_services(cfg)
    problems += rollout_v07_problems(cfg)
    problems += check_router_replay(cfg)
    problems += check_tiled_mlp(cfg)
    problems += check_profiler(cfg)
    return problems


def check_rollout_trace(cfg: PPOTrainerConfig) -> list[str]:
    """rollout.trace: the spans come from the agent loop, and weave must be installed to be chosen."""
    import importlib.util

    rollout = cfg.actor_rollout_ref.rollout
    backend = rollout.trace.backend
    if backend is None:
        return []
    problems = []
    if rollout.mode != "async":
        problems.append(f"actor_rollout_ref.rollout.trace.backend={backend} traces the agent loop's trajectories; "
                        "set actor_rollout_ref.rollout.mode=async (the agent loop), or trace.backend=null.")
    if importlib.util.find_spec(backend) is None:
        problems.append(f"actor_rollout_ref.rollout.trace.backend={backend} needs the {backend} package, which is not "
                        f"installed: `pip install {backend}`, or use trace.backend=mlflow (installed with the "
                        "tracking extra).")
    return problems


def check_rollout_skip(cfg: PPOTrainerConfig) -> list[str]:
    """rollout.skip: replaying needs something dumped first."""
    skip = cfg.actor_rollout_ref.rollout.skip
    if skip.enable and skip.dump_step == 0 and skip.post_dump_action in ("repeat", "repeat_last"):
        return [f"actor_rollout_ref.rollout.skip.dump_step=0 dumps nothing, so post_dump_action="
                f"{skip.post_dump_action} (action={skip.action}) has nothing to replay. Set dump_step (max_dump_step) "
                ">= 1, or action=cache (post_dump_action=rollout or rollout_with_dump)."]
    return []


# ---------------------------------------------------------------- batch sizes


@dataclass
class _Update:
    """One trained model's batch keys (actor or critic), with the prefix used in messages."""

    prefix: str
    mini: int
    n: int
    dp: int
    dp_how: str
    micro_legacy: int | None
    micro_per_gpu: int | None
    dynamic: bool


def _data_parallel(cfg: PPOTrainerConfig, sp: int, sp_key: str) -> tuple[int, str]:
    how = (
        f"trainer.nnodes * trainer.n_gpus_per_node / {sp_key} = "
        f"{cfg.trainer.nnodes} * {cfg.trainer.n_gpus_per_node} / {sp}"
    )
    return cfg.world_size // sp, how


def resolve_micro(
    prefix: str,
    legacy_key: str,
    per_gpu_key: str,
    legacy: int | None,
    per_gpu: int | None,
    dp: int,
    problems: list[str],
) -> int | None:
    """The per-worker micro-batch size, from the per-gpu key or the deprecated global one (not both)."""
    if legacy is not None and per_gpu is not None:
        problems.append(
            f"{prefix}.{legacy_key} ({legacy}) and {prefix}.{per_gpu_key} ({per_gpu}) are both set; "
            f"{prefix}.{legacy_key} is deprecated: remove it, or set {prefix}.{per_gpu_key}=null to keep it."
        )
        return None
    if legacy is None and per_gpu is None:
        problems.append(
            f"Set {prefix}.{per_gpu_key} (samples per forward pass on one worker), "
            f"or turn on dynamic batch sizes (use_dynamic_bsz=true)."
        )
        return None
    if per_gpu is not None:
        return per_gpu
    if legacy % dp != 0 or legacy < dp:
        problems.append(
            f"{prefix}.{legacy_key} ({legacy}) is a global size and must be a multiple of the "
            f"data-parallel size {dp}; better set {prefix}.{per_gpu_key}={max(1, legacy // dp)} instead."
        )
        return None
    return legacy // dp


def _check_update(u: _Update, train_batch_size: int) -> list[str]:
    problems: list[str] = []
    mini_key, micro_key = f"{u.prefix}.ppo_mini_batch_size", f"{u.prefix}.ppo_micro_batch_size_per_gpu"
    if u.mini > train_batch_size:
        problems.append(
            f"{mini_key} ({u.mini}) is larger than data.train_batch_size ({train_batch_size}): "
            f"one optimizer step cannot use more prompts than a training step has."
        )
    elif train_batch_size % u.mini != 0:
        problems.append(
            f"data.train_batch_size * {N} = {train_batch_size} * {u.n} = {train_batch_size * u.n} is not divisible "
            f"by {mini_key} * {N} = {u.mini} * {u.n} = {u.mini * u.n}; "
            f"pick a ppo_mini_batch_size that divides {train_batch_size}."
        )
    micro = None
    if not u.dynamic:  # with dynamic sizes micro-batches are packed by token count instead
        micro = resolve_micro(
            u.prefix,
            "ppo_micro_batch_size",
            "ppo_micro_batch_size_per_gpu",
            u.micro_legacy,
            u.micro_per_gpu,
            u.dp,
            problems,
        )
    responses = u.mini * u.n
    if responses % u.dp != 0:
        problems.append(
            f"{mini_key} * {N} = {u.mini} * {u.n} = {responses} responses per optimizer step cannot be split "
            f"evenly over {u.dp} data-parallel workers ({u.dp_how}); make it a multiple of {u.dp}."
        )
        return problems
    if micro is None:
        return problems
    per_worker = responses // u.dp
    share = f"{per_worker} (= {mini_key} {u.mini} * {N} {u.n} / {u.dp} workers)"
    if u.micro_per_gpu is None:  # derived from the deprecated global size
        micro_desc = f"{u.prefix}.ppo_micro_batch_size / workers = {u.micro_legacy} / {u.dp} = {micro}"
    else:
        micro_desc = f"{micro_key} ({micro})"
    if micro > per_worker:
        problems.append(
            f"{micro_desc} is larger than the mini-batch each worker gets, {share}; "
            f"set it to a divisor of {per_worker}."
        )
    elif per_worker % micro != 0:
        problems.append(
            f"The mini-batch each worker gets, {share}, is not divisible by {micro_desc}; "
            f"set it to a divisor of {per_worker}."
        )
    return problems


def check_actor_rollout_n(cfg: PPOTrainerConfig) -> list[str]:
    """The actor sizes its mini-batches by actor.rollout_n (the yaml makes it follow rollout.n)."""
    arr, n = cfg.actor_rollout_ref, cfg.actor_rollout_ref.rollout.n
    # the reference's too (upstream v0.7's ref section is an actor config): it must describe the same batches
    return [
        f"actor_rollout_ref.{role}.rollout_n ({section.rollout_n}) differs from {N} ({n}); "
        f"leave actor_rollout_ref.{role}.rollout_n at its default, ${{{N}}}."
        for role, section in (("actor", arr.actor), ("ref", arr.ref)) if section.rollout_n != n
    ]


def check_actor_batches(cfg: PPOTrainerConfig) -> list[str]:
    actor = cfg.actor_rollout_ref.actor
    sp_key = "actor_rollout_ref.actor.ulysses_sequence_parallel_size"
    dp, how = _data_parallel(cfg, actor.ulysses_sequence_parallel_size, sp_key)
    update = _Update(
        "actor_rollout_ref.actor",
        actor.ppo_mini_batch_size,
        cfg.actor_rollout_ref.rollout.n,
        dp,
        how,
        actor.ppo_micro_batch_size,
        actor.ppo_micro_batch_size_per_gpu,
        actor.use_dynamic_bsz,
    )
    return _check_update(update, cfg.data.train_batch_size) if dp >= 1 else []


def check_critic_loss_scale(cfg: PPOTrainerConfig) -> list[str]:
    """critic.loss_scale_factor (it follows the actor's, whose check names an inherited value): a divisor of
    seq-mean-token-sum-norm only, and positive."""
    critic = cfg.critic
    factor = critic.loss_scale_factor
    if factor is None or factor == cfg.actor_rollout_ref.actor.loss_scale_factor:
        return []
    if critic.loss_agg_mode != "seq-mean-token-sum-norm":
        return [f"critic.loss_scale_factor={factor} divides the value loss only with critic.loss_agg_mode="
                f"seq-mean-token-sum-norm, not {critic.loss_agg_mode}; set that mode or critic.loss_scale_factor=null."]
    return [] if factor > 0 else [f"critic.loss_scale_factor must be > 0 (the loss's divisor), got {factor}."]


def check_critic_batches(cfg: PPOTrainerConfig) -> list[str]:
    critic, n = cfg.critic, cfg.actor_rollout_ref.rollout.n
    problems: list[str] = []
    if critic.rollout_n != n:
        problems.append(
            f"critic.rollout_n ({critic.rollout_n}) differs from {N} ({n}); "
            f"leave critic.rollout_n at its default, ${{{N}}}."
        )
    dp, how = _data_parallel(cfg, critic.ulysses_sequence_parallel_size, "critic.ulysses_sequence_parallel_size")
    if dp < 1:
        return problems
    update = _Update(
        "critic",
        critic.ppo_mini_batch_size,
        n,
        dp,
        how,
        critic.ppo_micro_batch_size,
        critic.ppo_micro_batch_size_per_gpu,
        critic.use_dynamic_bsz,
    )
    problems += _check_update(update, cfg.data.train_batch_size)
    if not critic.use_dynamic_bsz:
        resolve_micro(
            "critic",
            "forward_micro_batch_size",
            "forward_micro_batch_size_per_gpu",
            critic.forward_micro_batch_size,
            critic.forward_micro_batch_size_per_gpu,
            dp,
            problems,
        )
    return problems


def check_log_prob_batches(cfg: PPOTrainerConfig) -> list[str]:
    """Log-prob passes only need a micro-batch size; the last micro-batch may be short."""
    problems: list[str] = []
    rollout, ref = cfg.actor_rollout_ref.rollout, cfg.actor_rollout_ref.ref
    dp = max(1, cfg.world_size // rollout.tensor_model_parallel_size)
    if not rollout.log_prob_use_dynamic_bsz:
        resolve_micro(
            "actor_rollout_ref.rollout",
            "log_prob_micro_batch_size",
            "log_prob_micro_batch_size_per_gpu",
            rollout.log_prob_micro_batch_size,
            rollout.log_prob_micro_batch_size_per_gpu,
            dp,
            problems,
        )
    if cfg.use_reference_policy and not ref.log_prob_use_dynamic_bsz:
        resolve_micro(
            "actor_rollout_ref.ref",
            "log_prob_micro_batch_size",
            "log_prob_micro_batch_size_per_gpu",
            ref.log_prob_micro_batch_size,
            ref.log_prob_micro_batch_size_per_gpu,
            dp,
            problems,
        )
    return problems


# ---------------------------------------------------------------- everything else


def check_resources(cfg: PPOTrainerConfig) -> list[str]:
    problems: list[str] = []
    world = cfg.world_size
    world_how = f"trainer.nnodes * trainer.n_gpus_per_node = {cfg.trainer.nnodes} * {cfg.trainer.n_gpus_per_node}"
    divisors = [
        (
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
            cfg.actor_rollout_ref.actor.ulysses_sequence_parallel_size,
        ),
        (
            "actor_rollout_ref.rollout.tensor_model_parallel_size",
            cfg.actor_rollout_ref.rollout.tensor_model_parallel_size,
        ),
    ]
    if cfg.use_critic:
        divisors.append(("critic.ulysses_sequence_parallel_size", cfg.critic.ulysses_sequence_parallel_size))
    for key, value in divisors:
        if world % value != 0:
            problems.append(f"{key} ({value}) must divide the number of workers, {world_how} = {world}.")
    return problems


def check_algorithm(cfg: PPOTrainerConfig) -> list[str]:
    problems: list[str] = []
    estimator, n = cfg.algorithm.adv_estimator, cfg.actor_rollout_ref.rollout.n
    if estimator in GROUP_ADV_ESTIMATORS and estimator not in SINGLETON_GROUP_ESTIMATORS and n == 1:
        problems.append(
            f"algorithm.adv_estimator={estimator} compares the responses to the same prompt, but {N}=1 gives one "
            f"response per prompt, so every advantage is 0; set {N} to 2 or more (e.g. {N}=4)."
        )
    if estimator in ("optimal_token_baseline", "tir_optimal_token_baseline") and \
            not getattr(cfg.actor_rollout_ref.actor, "calculate_sum_pi_squared", False):
        problems.append(
            f"algorithm.adv_estimator={estimator} weights each token by sum_pi_squared from the actor's log-prob "
            "pass; set actor_rollout_ref.actor.calculate_sum_pi_squared=true (upstream's requirement too).")
    if cfg.algorithm.use_kl_in_reward and cfg.actor_rollout_ref.actor.use_kl_loss:
        warnings.warn(
            "algorithm.use_kl_in_reward=true and actor_rollout_ref.actor.use_kl_loss=true both penalise the KL "
            "to the reference policy, so it is counted twice; usually only one is wanted.",
            ConfigWarning,
            stacklevel=2,
        )
    arr = cfg.actor_rollout_ref
    problems += rollout_correction_problems(cfg.algorithm.rollout_correction, arr.rollout.calculate_log_probs,
                                            arr.actor.policy_loss.loss_mode)
    return problems


def check_dynamic_sampling(cfg: PPOTrainerConfig) -> list[str]:
    """algorithm.filter_groups (DAPO) and data.gen_batch_size, which only it uses."""
    fg, data, n = cfg.algorithm.filter_groups, cfg.data, cfg.actor_rollout_ref.rollout.n
    key = "algorithm.filter_groups"
    if not fg.enable:
        problems = []
        if data.gen_batch_size is not None and data.gen_batch_size != data.train_batch_size:
            problems.append(
                f"data.gen_batch_size={data.gen_batch_size} differs from data.train_batch_size="
                f"{data.train_batch_size}, but only DAPO's dynamic sampling generates more prompts than it trains on; "
                f"set {key}.enable=true (with {key}.metric) or remove data.gen_batch_size."
            )
        if fg.metric is not None:
            warnings.warn(f"{key}.metric={fg.metric} has no effect while {key}.enable=false", ConfigWarning,
                          stacklevel=2)
        return problems
    problems = []
    if fg.metric is None:
        problems.append(f"{key}.enable=true needs {key}.metric: the per-response value whose spread within a group "
                        f"decides whether the group is kept (acc | score | seq_reward | seq_final_reward).")
    if fg.metric == "seq_final_reward" and cfg.algorithm.use_kl_in_reward:
        problems.append(
            f"{key}.metric=seq_final_reward with algorithm.use_kl_in_reward=true would need the reference and "
            f"old log-probs of every generated response before filtering; use {key}.metric=seq_reward (the score "
            "before the KL penalty) or acc.")
    if fg.metric == "acc" and cfg.reward_model.enable:
        problems.append(
            f"{key}.metric=acc with reward_model.enable=true: the reward model's scores replace the rule reward and "
            f"carry no acc field; use {key}.metric=score or seq_reward.")
    responses = data.resolved_gen_batch_size * n
    if responses % cfg.world_size != 0:
        problems.append(
            f"data.gen_batch_size * {N} = {data.resolved_gen_batch_size} * {n} = {responses} responses per "
            f"generation round cannot be split evenly over {cfg.world_size} workers; make it a multiple of "
            f"{cfg.world_size}.")
    return problems


def _warn_short(key: str, value: int, sp: int, need: int, how: str) -> None:
    if value * sp < need:
        sp_note = f" * sequence parallel {sp}" if sp > 1 else ""
        warnings.warn(
            f"{key} ({value}{sp_note}) is less than {how} = {need}: one full-length sequence does not fit in a "
            f"micro-batch's token budget, so long sequences go alone and memory use exceeds the budget.",
            ConfigWarning,
            stacklevel=3,
        )


def check_lengths(cfg: PPOTrainerConfig) -> list[str]:
    problems: list[str] = []
    data, arr = cfg.data, cfg.actor_rollout_ref
    need = data.max_prompt_length + data.max_response_length
    how = f"data.max_prompt_length + data.max_response_length = {data.max_prompt_length} + {data.max_response_length}"
    budgets = []
    if arr.actor.use_dynamic_bsz:
        budgets.append(
            (
                "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
                arr.actor.ppo_max_token_len_per_gpu,
                arr.actor.ulysses_sequence_parallel_size,
            )
        )
    if arr.rollout.log_prob_use_dynamic_bsz:
        budgets.append(
            (
                "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
                arr.rollout.log_prob_max_token_len_per_gpu,
                arr.actor.ulysses_sequence_parallel_size,
            )
        )
    if cfg.use_reference_policy and arr.ref.log_prob_use_dynamic_bsz:
        budgets.append(
            (
                "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
                arr.ref.log_prob_max_token_len_per_gpu,
                arr.ref.ulysses_sequence_parallel_size,
            )
        )
    if cfg.use_critic and cfg.critic.use_dynamic_bsz:
        sp = cfg.critic.ulysses_sequence_parallel_size
        budgets.append(("critic.ppo_max_token_len_per_gpu", cfg.critic.ppo_max_token_len_per_gpu, sp))
        budgets.append(("critic.forward_max_token_len_per_gpu", cfg.critic.forward_max_token_len_per_gpu, sp))
    for key, value, sp in budgets:
        _warn_short(key, value, sp, need, how)

    max_len = arr.rollout.max_model_len
    total = arr.rollout.prompt_length + arr.rollout.response_length
    if max_len is not None and max_len < total:
        problems.append(
            f"actor_rollout_ref.rollout.max_model_len ({max_len}) is smaller than actor_rollout_ref.rollout."
            f"prompt_length + response_length = {arr.rollout.prompt_length} + {arr.rollout.response_length} = "
            f"{total}; raise it or set it to null."
        )
    return problems


def check_trainer(cfg: PPOTrainerConfig) -> list[str]:
    problems: list[str] = []
    if cfg.trainer.resume_mode == "resume_path" and not cfg.trainer.resume_from_path:
        problems.append(
            "trainer.resume_mode=resume_path needs trainer.resume_from_path (a global_step_* checkpoint folder)."
        )
    return problems


def check_multi_turn(cfg: PPOTrainerConfig) -> list[str]:
    """Tools and interactions run in the agent loop and render the conversation from the row's messages."""
    rollout = cfg.actor_rollout_ref.rollout
    multi_turn = rollout.multi_turn
    problems: list[str] = []
    if multi_turn.enable and rollout.mode != "async":
        problems.append("actor_rollout_ref.rollout.multi_turn.enable=true needs actor_rollout_ref.rollout.mode=async "
                        "(multi-turn rollouts run in the agent loop).")
    if multi_turn.enable and not cfg.data.return_raw_chat:
        problems.append("actor_rollout_ref.rollout.multi_turn.enable=true needs data.return_raw_chat=true: the tool "
                        "agent renders each row's chat messages with the tool schemas.")
    if not multi_turn.enable and (multi_turn.tool_config_path or multi_turn.interaction_config_path
                                  or multi_turn.function_tool_path):
        problems.append("actor_rollout_ref.rollout.multi_turn.tool_config_path / function_tool_path / "
                        "interaction_config_path are set but multi_turn.enable=false; set "
                        "actor_rollout_ref.rollout.multi_turn.enable=true (and mode=async).")
    return problems + _over_sample_problems(rollout)


def _over_sample_problems(rollout) -> list[str]:
    key, rate = "actor_rollout_ref.rollout.over_sample_rate", rollout.over_sample_rate
    if rate == 0:
        return []
    if not 0 < rate < 1:
        return [f"{key}={rate}: give the fraction of each rank's trajectories to abort once the rest have finished, "
                "in [0, 1) (0: off)."]
    if rollout.mode != "async":
        return [f"{key}={rate} needs actor_rollout_ref.rollout.mode=async: the sync rollout generates the batch in "
                "one call, with nothing to abort early."]
    if rollout.name == "vllm" and rollout.tensor_model_parallel_size > 1:
        return [f"{key}={rate} with actor_rollout_ref.rollout.tensor_model_parallel_size="
                f"{rollout.tensor_model_parallel_size}: aborting requests across the ranks of one tensor-parallel "
                "engine is not built; use tensor_model_parallel_size=1 or over_sample_rate=0."]
    return []


def check_conditional_refusals(cfg: PPOTrainerConfig) -> list[str]:
    rollout = cfg.actor_rollout_ref.rollout
    model = cfg.actor_rollout_ref.model
    active = {"actor_rollout_ref.rollout.ignore_eos": rollout.ignore_eos and rollout.name == "hf",
              "actor_rollout_ref.model.hf_config_path": bool(model.hf_config_path) and rollout.name == "vllm",
              "actor_rollout_ref.model.tokenizer_path": bool(model.tokenizer_path) and rollout.name == "vllm"}
    problems = []
    for key, value, condition, refusal in CONDITIONAL_REFUSALS:
        if active[key]:
            problems.append(f"{key}={value} is refused with {condition}: {refusal.why}. {refusal.todo}")
    return problems
