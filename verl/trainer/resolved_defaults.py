"""The defaults that depend on the machine, resolved once on the driver before any worker starts, and logged.

Upstream verl computes in bf16 when `fsdp_config.mixed_precision` is unset and its rollout engines default to
`dtype: bfloat16`. Here the yaml leaves those keys `null` ("unset"), and this module fills them in with the
hardware's dtype (`verl.utils.device.hardware_compute_dtype`: bf16 where the matmuls are native, fp32 where they
would be emulated). A value the user set is never touched. The workers resolve a `null` they still see (a worker
built directly, in a test) through the same function, so both ends always agree.

Every default that shapes the speed of a run (precision, remove padding, gradient checkpointing) gets one line
on stderr at the start, saying what was chosen and why, so a run's log tells how it computed.
"""

from __future__ import annotations

import sys
from typing import Any

from verl.models.checkpoint_policy import resolve_checkpointing_policy, selective_activation_bytes
from verl.utils.device import hardware_compute_dtype, is_cuda_available

LOG_PREFIX = "[defaults]"

# rollout.dtype takes the engine's long names; param_dtype takes verl's short ones
_ROLLOUT_NAME = {"bf16": "bfloat16", "fp32": "float32"}


def resolve_param_dtype(fsdp_config: Any, key: str, training: bool = True) -> str:
    """Fill `<key>.mixed_precision.param_dtype` when unset; return the log line for it."""
    mp = fsdp_config.mixed_precision
    where = f"{key}.mixed_precision.param_dtype"
    weights = f"weights kept in {fsdp_config.model_dtype} (model_dtype)"
    if training:
        weights = f"master {weights}, gradients reduced in {mp.reduce_dtype}"
    if mp.param_dtype is not None:
        return f"{where}={mp.param_dtype} (set); {weights}"
    dtype, why = hardware_compute_dtype()
    mp.param_dtype = dtype
    return f"{where} unset -> {dtype} ({why}); {weights}; set it to override"


def resolve_rollout_dtype(rollout: Any, key: str) -> str:
    """Fill `<key>.dtype` (the vLLM engine's dtype) when unset; return the log line for it."""
    if rollout.dtype is not None:
        return f"{key}.dtype={rollout.dtype} (set)"
    dtype, why = hardware_compute_dtype()
    rollout.dtype = _ROLLOUT_NAME[dtype]
    return f"{key}.dtype unset -> {rollout.dtype} ({why}); set it to override"


def remove_padding_line(value: bool, key: str) -> str:
    if value:
        return f"{key}=true (upstream's default): each micro-batch's real tokens are packed into one row, no padding"
    return f"{key}=false: every row is padded to the micro-batch's longest (upstream's default is true)"


def micro_batch_tokens(section: Any, sequence_length: int) -> int:
    """The most tokens one training micro-batch of an actor/critic section holds: its token budget with
    use_dynamic_bsz, else ppo_micro_batch_size_per_gpu rows of the whole sequence length."""
    if section.use_dynamic_bsz:
        return int(section.ppo_max_token_len_per_gpu)
    return int(section.ppo_micro_batch_size_per_gpu or 1) * int(sequence_length)


def _activation_bytes(model: Any, key: str, tokens: int | None) -> int | None:
    """selective_activation_bytes for ``model``'s HF config over ``tokens``; None where no GPU decides on it or
    the config cannot be read here (the policy is then full, which the log line says)."""
    if tokens is None or not is_cuda_available():
        return None
    from transformers import AutoConfig

    from verl.models.loader import model_config_path

    try:
        hf_config = AutoConfig.from_pretrained(model_config_path(model, key)[0],
                                               trust_remote_code=model.trust_remote_code)
    except Exception as err:  # noqa: BLE001 - the worker's load reports a bad path with its own error
        print(f"{LOG_PREFIX} {key}: the model config could not be read for the checkpointing estimate ({err})",
              file=sys.stderr, flush=True)
        return None
    return selective_activation_bytes(hf_config, tokens)


def resolve_checkpointing(model: Any, key: str, tokens: int | None = None) -> str:
    """Fill `<key>.gradient_checkpointing_policy` when auto (and checkpointing is on); return the log line.
    ``tokens``: the largest training micro-batch's tokens, which decides auto on a GPU."""
    if not model.enable_gradient_checkpointing:
        return (f"{key}.enable_gradient_checkpointing=false: activations are kept for backward (upstream's "
                "default is true)")
    where = f"{key}.gradient_checkpointing_policy"
    if model.gradient_checkpointing_policy != "auto":
        policy, _ = resolve_checkpointing_policy(model.gradient_checkpointing_policy)
        chosen = f"{where}={policy} (set)"
    else:
        policy, why = resolve_checkpointing_policy("auto", _activation_bytes(model, key, tokens))
        model.gradient_checkpointing_policy = policy
        chosen = f"{where} auto -> {policy} ({why})"
    return (f"{key}.enable_gradient_checkpointing=true (upstream's default), {chosen}; "
            "docs/performance.md#defaults has what each costs; set enable_gradient_checkpointing=false to trade "
            "memory for speed")


def resolve_ppo_defaults(config: Any) -> list[str]:
    """Resolve the machine-dependent keys of a PPOTrainerConfig in place; return the lines to log (only the
    roles this run builds). Call after `set_device_preference`, before Ray starts."""
    arr = config.actor_rollout_ref
    length = config.data.max_prompt_length + config.data.max_response_length
    lines = [
        resolve_param_dtype(arr.actor.fsdp_config, "actor_rollout_ref.actor.fsdp_config"),
        remove_padding_line(arr.model.use_remove_padding, "actor_rollout_ref.model.use_remove_padding"),
        resolve_checkpointing(arr.model, "actor_rollout_ref.model", micro_batch_tokens(arr.actor, length)),
    ]
    rollout_line = resolve_rollout_dtype(arr.rollout, "actor_rollout_ref.rollout")
    if arr.rollout.name != "hf":  # the hf rollout generates with the actor's module, in its param_dtype
        lines.append(rollout_line)
    ref_line = resolve_param_dtype(arr.ref.fsdp_config, "actor_rollout_ref.ref.fsdp_config")
    if config.use_reference_policy and not config.ref_in_actor:
        lines.append(ref_line)
    critic = config.critic.model
    critic_lines = [resolve_param_dtype(critic.fsdp_config, "critic.model.fsdp_config"),
                    remove_padding_line(critic.use_remove_padding, "critic.model.use_remove_padding"),
                    resolve_checkpointing(critic, "critic.model", micro_batch_tokens(config.critic, length))]
    if config.use_critic:
        lines += critic_lines
    rm_line = resolve_param_dtype(config.reward_model.model.fsdp_config, "reward_model.model.fsdp_config")
    if config.reward_model.enable:
        lines.append(rm_line)
    return lines


def resolve_sft_defaults(config: Any) -> list[str]:
    """The same for an SFTTrainerConfig; each rank resolves (same machine, same answer), rank 0 logs."""
    return [
        resolve_param_dtype(config.model.fsdp_config, "model.fsdp_config"),
        remove_padding_line(config.use_remove_padding, "use_remove_padding"),
        resolve_checkpointing(config.model, "model",
                              int(config.data.micro_batch_size_per_gpu or 1) * int(config.data.max_length)),
    ]


def resolve_generation_defaults(config: Any) -> list[str]:
    """The same for main_generation's GenerationConfig: the engine's dtype (vllm) or the hf rollout's compute
    dtype (the FSDP module generates under actor.fsdp_config's mixed precision)."""
    fsdp_line = resolve_param_dtype(config.actor.fsdp_config, "actor.fsdp_config", training=False)
    rollout_line = resolve_rollout_dtype(config.rollout, "rollout")
    return [fsdp_line if config.rollout.name == "hf" else rollout_line]


def log_defaults(lines: list[str]) -> None:
    """The resolved defaults, one line each, on the driver's stderr."""
    for line in lines:
        print(f"{LOG_PREFIX} {line}", file=sys.stderr, flush=True)
