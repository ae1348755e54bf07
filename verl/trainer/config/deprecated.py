"""Deprecated keys upstream verl still runs, run here the same way, each with a one-line warning.

- `*.ppo_micro_batch_size`, `critic.forward_micro_batch_size`, `rollout.log_prob_micro_batch_size`,
  `ref.log_prob_micro_batch_size` are global sizes: upstream divides them by the data-parallel size (world size /
  the role's ulysses_sequence_parallel_size) and uses the result as the per-GPU size. When the `_per_gpu` key is
  set too, the `_per_gpu` key wins. For the actor's and the critic's update sizes that is settled on the composed
  config before it is typed (`fold_both_update_sizes`): upstream's ActorConfig / CriticConfig, built in Python with
  both, raise ValueError (so do ours), while its trainer runs the scripts that set both.
- `trainer.profile_steps` (older upstream): `global_profiler.steps` with the tool of that time, nsys, and each
  role whose `profiler.ranks` / `all_ranks` chose ranks enabled (`fold_profile_steps`). `<role>.profiler.discrete`
  (older upstream) is `<role>.profiler.tool_config.nsys.discrete` (verl.trainer.config.aliases).
- `trainer.use_legacy_worker_impl` as a bool (older upstream): true is `enable`, false `disable`
  (`fold_legacy_worker_bool`).
- `data.val_batch_size`: upstream generates the validation set in batches of that many prompts (the trainer's
  val dataloader does the same here); unset, the whole set is one batch.

The yaml makes each `_per_gpu` default follow its global key (`${verl.per_gpu_default:<global>,<default>}`): null
while the global size is set, so a command line that sets only the global size is not taken as "both set".
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from omegaconf import OmegaConf

from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.utils.config_errors import ConfigWarning

RESOLVER = "verl.per_gpu_default"


def _per_gpu_default(global_size: Any, default: Any) -> Any:
    """The `_per_gpu` key's default: null when the deprecated global size is set (it then decides), else `default`."""
    return None if global_size is not None else default


def register_resolvers() -> None:
    """The yaml's `${verl.per_gpu_default:...}` and `${verl.reward_manager_name:...}`; called when
    verl.trainer.config is imported (before Hydra)."""
    from verl.trainer.config.reward_section import REWARD_MANAGER_NAME_RESOLVER, reward_manager_name

    if not OmegaConf.has_resolver(RESOLVER):
        OmegaConf.register_new_resolver(RESOLVER, _per_gpu_default)
    if not OmegaConf.has_resolver(REWARD_MANAGER_NAME_RESOLVER):
        OmegaConf.register_new_resolver(REWARD_MANAGER_NAME_RESOLVER, reward_manager_name)


@dataclass(frozen=True)
class _Pair:
    section: Any  # the typed section holding both keys
    prefix: str  # its dotted name
    legacy: str  # the deprecated global key
    per_gpu: str  # the per-GPU key


def _pairs(cfg: PPOTrainerConfig) -> list[_Pair]:
    arr = cfg.actor_rollout_ref
    return [
        _Pair(arr.actor, "actor_rollout_ref.actor", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
        _Pair(arr.rollout, "actor_rollout_ref.rollout", "log_prob_micro_batch_size",
              "log_prob_micro_batch_size_per_gpu"),
        _Pair(arr.ref, "actor_rollout_ref.ref", "log_prob_micro_batch_size", "log_prob_micro_batch_size_per_gpu"),
        _Pair(cfg.critic, "critic", "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu"),
        _Pair(cfg.critic, "critic", "forward_micro_batch_size", "forward_micro_batch_size_per_gpu"),
    ]


_UPDATE_PAIRS = (("actor_rollout_ref.actor", "ppo_micro_batch_size"), ("critic", "ppo_micro_batch_size"))


def fold_both_update_sizes(node: Any) -> dict[str, Any]:
    """On the composed config, before typing: where an actor or critic section sets both its deprecated global
    update size and the `_per_gpu` one (without use_dynamic_bsz), the `_per_gpu` one wins with a warning, as in
    upstream's trainer. Returns the writes for the caller's config."""
    from omegaconf import open_dict, read_write

    writes: dict[str, Any] = {}
    for prefix, legacy in _UPDATE_PAIRS:
        section = OmegaConf.select(node, prefix)
        if section is None or section.get("use_dynamic_bsz", False):
            continue
        global_size, per_gpu = section.get(legacy), section.get(f"{legacy}_per_gpu")
        if global_size is None or per_gpu is None:
            continue
        _warn(f"{prefix}.{legacy}={global_size} is deprecated and {prefix}.{legacy}_per_gpu={per_gpu} is set too: "
              f"{prefix}.{legacy}_per_gpu wins and the global size is not used; remove {prefix}.{legacy}.")
        with read_write(node), open_dict(node):
            OmegaConf.update(node, f"{prefix}.{legacy}", None, merge=False)
        writes[f"{prefix}.{legacy}"] = None
    return writes


_PROFILED_ROLES = ("actor_rollout_ref.actor", "actor_rollout_ref.ref", "critic", "reward_model")


def fold_profile_steps(node: Any) -> dict[str, Any]:
    """Older upstream's `trainer.profile_steps` on the composed config, before typing: it is
    `global_profiler.steps`, its tool was nsys (the only one then), and a role was profiled when its
    `profiler.ranks` or `all_ranks` chose ranks (there was no `enable`). Folded so with a warning; both steps keys set
    to different values stay for the check to refuse. Returns the writes for the caller's config."""
    from omegaconf import open_dict, read_write

    steps = OmegaConf.select(node, "trainer.profile_steps")
    if steps is None:
        return {}
    steps = list(steps)
    current = OmegaConf.select(node, "global_profiler.steps")
    if current is not None and list(current) != steps:
        return {}  # profiler_checks refuses the pair
    writes: dict[str, Any] = {"global_profiler.steps": steps, "trainer.profile_steps": None}
    if OmegaConf.select(node, "global_profiler.tool") is None:
        writes["global_profiler.tool"] = "nsys"
    for role in _PROFILED_ROLES:
        section = OmegaConf.select(node, f"{role}.profiler")
        if section is not None and not section.get("enable") and (section.get("all_ranks") or section.get("ranks")):
            writes[f"{role}.profiler.enable"] = True
    tool = writes.get("global_profiler.tool", OmegaConf.select(node, "global_profiler.tool"))
    enabled = sorted(k for k in writes if k.endswith(".enable"))
    _warn(f"trainer.profile_steps={steps} is older upstream's spelling: run as global_profiler.steps={steps} with "
          f"global_profiler.tool={tool}" + (f" and {', '.join(f'{k}=true' for k in enabled)}" if enabled else "")
          + "; write those keys instead.")
    with read_write(node), open_dict(node):
        for key, value in writes.items():
            OmegaConf.update(node, key, value, merge=False)
    return writes


def fold_legacy_worker_bool(node: Any) -> dict[str, Any]:
    """`trainer.use_legacy_worker_impl` written as a bool (older upstream scripts; upstream's own hint reads
    "set trainer.use_legacy_worker_impl = false to switch to the new worker implementation"): true is `enable`,
    false is `disable`, folded on the composed config before typing, with a warning."""
    from omegaconf import open_dict, read_write

    value = OmegaConf.select(node, "trainer.use_legacy_worker_impl")
    if not isinstance(value, bool):
        return {}
    word = "enable" if value else "disable"
    _warn(f"trainer.use_legacy_worker_impl={str(value).lower()} is older upstream's bool spelling: run as "
          f"trainer.use_legacy_worker_impl={word}; write that instead.")
    with read_write(node), open_dict(node):
        OmegaConf.update(node, "trainer.use_legacy_worker_impl", word, merge=False)
    return {"trainer.use_legacy_worker_impl": word}


def _data_parallel(cfg: PPOTrainerConfig, pair: _Pair) -> tuple[int, str]:
    """Upstream's divisor: world size / the role's ulysses_sequence_parallel_size (the actor's for rollout and ref)."""
    sp_owner = cfg.critic if pair.prefix == "critic" else cfg.actor_rollout_ref.actor
    sp_key = "critic" if pair.prefix == "critic" else "actor_rollout_ref.actor"
    sp = sp_owner.ulysses_sequence_parallel_size
    how = f"trainer.nnodes * trainer.n_gpus_per_node = {cfg.world_size}"
    if sp > 1:
        how += f", / {sp_key}.ulysses_sequence_parallel_size {sp}"
    return max(1, cfg.world_size // sp), how


def apply_deprecated_keys(cfg: PPOTrainerConfig) -> tuple[dict[str, Any], list[str]]:
    """Turn the deprecated global sizes into per-GPU sizes in `cfg` (in place), warning once for each key set.

    Returns ({dotted key: new value} to write back into the composed config, problems).
    """
    writes: dict[str, Any] = {}
    problems: list[str] = []
    for pair in _pairs(cfg):
        legacy = getattr(pair.section, pair.legacy)
        if legacy is None:
            continue
        legacy_key, per_gpu_key = f"{pair.prefix}.{pair.legacy}", f"{pair.prefix}.{pair.per_gpu}"
        per_gpu = getattr(pair.section, pair.per_gpu)
        if per_gpu is not None:
            _warn(f"{legacy_key}={legacy} is deprecated and {per_gpu_key}={per_gpu} is set too: {per_gpu_key} wins "
                  f"and the global size is not used; remove {legacy_key}.")
        else:
            dp, how = _data_parallel(cfg, pair)
            if legacy < dp:
                problems.append(f"{legacy_key}={legacy} is a deprecated global size, divided by the data-parallel "
                                f"size ({how}) = {dp}: less than one sample per worker; set {per_gpu_key} instead.")
                continue
            per_gpu = legacy // dp
            rest = "" if legacy % dp == 0 else " (rounded down, as upstream does)"
            _warn(f"{legacy_key}={legacy} is deprecated: a global size, divided by the data-parallel size ({how}) = "
                  f"{dp} as upstream does, so {per_gpu_key}={per_gpu}{rest}; set {per_gpu_key}={per_gpu} instead.")
            setattr(pair.section, pair.per_gpu, per_gpu)
            writes[per_gpu_key] = per_gpu
            if pair.legacy == "ppo_micro_batch_size" and pair.prefix == "critic" \
                    and cfg.critic.forward_micro_batch_size_per_gpu is None:
                # the value pass follows the update's size, as upstream's forward_micro_batch_size does
                cfg.critic.forward_micro_batch_size_per_gpu = per_gpu
                cfg.critic.forward_micro_batch_size = None
                writes["critic.forward_micro_batch_size_per_gpu"] = per_gpu
                writes["critic.forward_micro_batch_size"] = None
        setattr(pair.section, pair.legacy, None)
        writes[legacy_key] = None
    ref, rollout = cfg.actor_rollout_ref.ref, cfg.actor_rollout_ref.rollout
    if ref.log_prob_micro_batch_size_per_gpu is None and rollout.log_prob_micro_batch_size_per_gpu is not None:
        # the yaml's ref size follows rollout's, which the global size above has just decided
        ref.log_prob_micro_batch_size_per_gpu = rollout.log_prob_micro_batch_size_per_gpu
        writes["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu"] = ref.log_prob_micro_batch_size_per_gpu
    if cfg.data.val_batch_size is not None:
        _warn(f"data.val_batch_size={cfg.data.val_batch_size} is deprecated upstream: as there, the validation set "
              f"is generated in batches of {cfg.data.val_batch_size} prompts (scores do not change; unset, the "
              "whole set is one batch).")
    return writes, problems


def _warn(message: str) -> None:
    warnings.warn(message, ConfigWarning, stacklevel=3)
