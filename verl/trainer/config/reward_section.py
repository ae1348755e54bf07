"""Upstream v0.7's `reward:` section (and its legacy top-level `sandbox_fusion:`), run as this schema's keys.

Upstream v0.7 moved the reward settings under a top-level `reward:` section and keeps the older spellings
(`reward_model.*`, `custom_reward_function.*`, `sandbox_fusion.*`) as a deprecated layout: its entry point calls
`migrate_legacy_reward_impl`, which copies every legacy key that is set (not null) over the `reward.*` one, without a
warning. This schema keeps the older layout, so here it is the other way round: each `reward.*` key is one of ours
(`V07_KEYS`), as one setting.

- On the command line (`verl.trainer.config.aliases.rewrite_aliases`), a `reward.*` override is rewritten to our key
  before Hydra; both spellings with different values are an error.
- The section is declared (reward/reward.yaml): each leaf is an interpolation of our key, so it reads the value the
  run uses. In a user's own yaml (`defaults: [ppo_trainer, _self_]` plus a `reward:` section), the leaves that are no
  longer the shipped interpolations are written; `fold_reward_section` moves them onto our keys on the composed
  config before it is typed and puts the shipped interpolations back. A leaf left at v0.7's own default is taken as
  not written (a copied section keeps our defaults), with a warning naming it where the run's value differs; a leaf
  whose key is also set here to another value is an error, unless the command line set it (the command line wins
  over a yaml, as in Hydra).
- Upstream v0.7 always scores through its reward loop. Our reward loop is `reward_model.use_reward_loop`; a
  `reward.*` key that only the loop reads (`LOOP_KEYS`: num_workers, max_concurrency_per_worker, the reward manager
  class by importlib, the judge's rollout) turns it on, as in v0.7; with `reward_model.use_reward_loop=false` given
  too it is an error.
- upstream's judge-engine keys this schema has no key for (enforce_eager, max_model_len, later upstream's
  scheduling_policy, ...) are vLLM engine arguments: they are `reward_model.rollout.engine_kwargs.vllm.<key>`, passed
  to `vllm.LLM` (`VLLM_ARGS`). The ones that are not (`REFUSED_ROLLOUT`, with the keys under its sections `mtp` and
  `disaggregation`) are refused unless at upstream's default, with what to do instead.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable
from typing import Any

from verl.trainer.config.yaml_files import GENERATED, TARGET_KEY, walk_keys
from verl.utils.config_errors import ConfigWarning
from verl.workers.config.reward_model import JUDGE_KEY_REFUSALS

MISSING = "???"
LOOP_SWITCH = "reward_model.use_reward_loop"
CLASS_NAME = "reward_model.reward_loop_class_name"
V07_CLASS_NAME = "custom_reward_manager"  # v0.7's reward.reward_manager.module.name default
# v0.7's name of the module its importlib reward manager file is imported as (ModuleConfig.name): upstream's loader
# reads the class from `reward.reward_manager.name` and the file by path, so nothing reads it; given, it is noted
MODULE_NAME = "reward.reward_manager.module.name"
REGISTERED_KEY = "reward_model.reward_manager"
SOURCE_KEY = "reward_model.reward_loop_source"
REWARD_MANAGER_NAME_RESOLVER = "verl.reward_manager_name"


def reward_manager_name(source: Any, registered: Any, class_name: Any) -> Any:
    """What v0.7's reward.reward_manager.name reads: the class in module.path with source=importlib (upstream's
    loader takes it as the object name), else the registry name (the yaml's `${verl.reward_manager_name:...}`)."""
    return class_name if source == "importlib" and class_name is not None else registered

_RM = "reward.reward_model"
_ROLLOUT_SAME = ("name", "dtype", "gpu_memory_utilization", "tensor_model_parallel_size", "prompt_length",
                 "response_length", "enable_prefix_caching")
# v0.7's judge-engine keys that are vllm.LLM arguments of the same name (our engine passes engine_kwargs.vllm last)
VLLM_ARGS = ("enforce_eager", "max_num_batched_tokens", "max_model_len", "max_num_seqs", "load_format",
             "enable_chunked_prefill", "disable_log_stats", "skip_tokenizer_init", "scheduling_policy")
_VLLM_DEFAULTS = (True, 8192, None, 1024, "auto", True, True, False, "fcfs")

# v0.7's key -> (ours, v0.7's default). A section (custom_reward_function, sandbox_fusion, engine_kwargs) maps
# every key under it; the default of a section is None (any leaf under it counts as written).
V07_KEYS: dict[str, tuple[str, Any]] = {
    "reward.num_workers": ("reward_model.num_workers", 8),
    "reward.max_concurrency_per_worker": ("reward_model.max_concurrency_per_worker", 16),
    "reward.custom_reward_function.path": ("custom_reward_function.path", None),
    "reward.custom_reward_function.name": ("custom_reward_function.name", "compute_score"),
    "reward.custom_reward_function": ("custom_reward_function", None),
    "reward.reward_kwargs": ("reward_model.reward_kwargs", None),
    "reward.reward_manager.source": ("reward_model.reward_loop_source", "register"),
    "reward.reward_manager.name": ("reward_model.reward_manager", "naive"),
    "reward.reward_manager.module.path": ("reward_model.reward_loop_module_path", None),
    f"{_RM}.enable": ("reward_model.enable", False),
    f"{_RM}.enable_resource_pool": ("reward_model.enable_resource_pool", False),
    f"{_RM}.n_gpus_per_node": ("reward_model.n_gpus_per_node", 8),
    f"{_RM}.nnodes": ("reward_model.nnodes", 0),
    f"{_RM}.model_path": ("reward_model.model.path", None),
    **{f"{_RM}.rollout.{k}": (f"reward_model.rollout.{k}", d)
       for k, d in zip(_ROLLOUT_SAME, (MISSING, "bfloat16", 0.5, 2, 2048, 2048, True), strict=True)},
    f"{_RM}.rollout.engine_kwargs": ("reward_model.rollout.engine_kwargs", None),
    **{f"{_RM}.rollout.{k}": (f"reward_model.rollout.engine_kwargs.vllm.{k}", d)
       for k, d in zip(VLLM_ARGS, _VLLM_DEFAULTS, strict=True)},
    # v0.7's deprecated legacy block: the judge-engine keys our reward_model.rollout lacks (null: unset)
    **{f"reward_model.rollout.{k}": (f"reward_model.rollout.engine_kwargs.vllm.{k}", None) for k in VLLM_ARGS},
    "reward.sandbox_fusion": ("reward_model.sandbox_fusion", None),
    "sandbox_fusion": ("reward_model.sandbox_fusion", None),  # v0.7's legacy top-level block (null: unset)
}

# keys only upstream's reward loop reads: written in v0.7's spelling, they turn ours on (v0.7 always runs it)
LOOP_KEYS = ("reward.num_workers", "reward.max_concurrency_per_worker", "reward.reward_manager.source",
             "reward.reward_manager.module", f"{_RM}.rollout")

# upstream's judge-engine keys with no counterpart here -> upstream's default (why and what to do:
# JUDGE_KEY_REFUSALS, one entry per key or section); v0.7's, then later upstream's
V07_REFUSED = ("cudagraph_capture_sizes", "free_cache_engine", "data_parallel_size", "expert_parallel_size",
                "limit_images")
REFUSED_ROLLOUT: dict[str, Any] = {
    **dict(zip(V07_REFUSED, (None, True, 1, 1, None), strict=True)),
    "pipeline_model_parallel_size": 1, "layered_summon": False, "full_determinism": False, "seed": 42,
    "multi_stage_wake_up": False, "ignore_eos": False, "temperature": 1.0, "top_k": -1, "top_p": 1.0,
    "do_sample": True, "n": 1, "quantization": None, "quantization_config_file": None, "mtp": None,
    **{f"disaggregation.{k}": d for k, d in (("enabled", False), ("prefill_replicas", 1), ("decode_replicas", 1),
                                             ("decode_tensor_model_parallel_size", None), ("transfer_backend", "nixl"),
                                             ("bootstrap_port", None), ("ib_device", None))},
}
_REFUSED_PREFIXES = (f"{_RM}.rollout.", "reward_model.rollout.")


def v07_key(key: str) -> tuple[str, str] | None:
    """(the v0.7 entry that matched, our key) for a v0.7-spelled dotted key, longest entry first; else None."""
    best = None
    for new in V07_KEYS:
        if (key == new or key.startswith(new + ".")) and (best is None or len(new) > len(best)):
            best = new
    if best is None:
        return None
    return best, V07_KEYS[best][0] + key[len(best):]


def _refused_name(key: str) -> str | None:
    """The judge-engine name (`seed`, `disaggregation.enabled`, `mtp.enable`) of a refused key, or None."""
    for prefix in _REFUSED_PREFIXES:
        name = key[len(prefix):] if key.startswith(prefix) else None
        if name is not None and name.split(".")[0] in JUDGE_KEY_REFUSALS:  # a key, or any key under a section
            return name
    return None


def refused_default(key: str) -> Any:
    """Upstream's default of a refused judge-engine key (a whole section, or a key under `mtp`: null)."""
    return REFUSED_ROLLOUT.get(_refused_name(key) or "")


def refused_rollout_key(key: str) -> str | None:
    """The refusal of an upstream judge-engine key this schema has no counterpart for, or None."""
    name = _refused_name(key)
    if name is None:
        return None
    section = name.split(".")[0]
    why, what = JUDGE_KEY_REFUSALS[section]
    era = "upstream v0.7's" if section in V07_REFUSED else "later upstream's"
    return f"{key} is {era} judge-engine key {name}, which has no counterpart here: {why}. {what}"


def implies_loop(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in LOOP_KEYS)


# -- a user's yaml ------------------------------------------------------------------------------------------------


def _leaves(section: str, node: Any) -> list[tuple[str, Any]]:
    if not isinstance(node, dict):
        return [(section, node)]
    return [(f"{section}.{k}", v) for k, v in walk_keys(node) if not isinstance(v, dict)
            and k.rpartition(".")[2] != TARGET_KEY]


def _v07_default(entry: str, key: str) -> Any:
    default = V07_KEYS[entry][1]
    return default if entry == key else None


@functools.cache
def _generated() -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.load(GENERATED)


def _our_default(key: str) -> Any:
    """Our shipped default of one of our keys (the flat generated yaml; its reward keys are plain values)."""
    from omegaconf import OmegaConf

    return OmegaConf.select(_generated(), key, default=None)


def _shipped_mirror(key: str) -> Any:
    """What a `reward.*` leaf reads with nothing set (the shipped yaml resolved on its own defaults)."""
    from omegaconf import OmegaConf

    return OmegaConf.select(_generated(), key, default=None) if key.startswith("reward.") else None


def command_line_keys() -> frozenset[str]:
    """Keys the running Hydra app's command line set (already in our spelling), or none outside one."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if not HydraConfig.initialized():
            return frozenset()
        task = HydraConfig.get().overrides.task
    except Exception:  # noqa: BLE001 - no Hydra app: nothing came from a command line
        return frozenset()
    return frozenset(o.split("=", 1)[0].lstrip("+~") for o in task if "=" in o)


def fold_plan(sections: dict[str, Any], current: Any, from_command_line: Iterable[str] = ()) -> tuple[
        dict[str, Any], list[str]]:
    """(our key -> value to write, problems) for the v0.7 sections of a composed config (`reward`, `sandbox_fusion`,
    the legacy `reward_model.rollout` keys we lack: plain containers, in that order, so a legacy key written after
    its `reward.*` twin wins, as in upstream's migration); `current(key)` reads one of our keys (None: absent)."""
    from_command_line = frozenset(from_command_line)
    writes: dict[str, Any] = {}
    problems: list[str] = []
    loop_by: str | None = None
    kept: list[str] = []
    for section, body in sections.items():
        for key, value in _leaves(section, body):
            if key == MODULE_NAME:
                if value not in (None, MISSING, V07_CLASS_NAME):
                    warnings.warn(f"your yaml's reward section: {module_name_note(value)}.", ConfigWarning,
                                  stacklevel=2)
                continue
            matched = v07_key(key)
            refusal = refused_rollout_key(key)
            if refusal is not None:
                if value != refused_default(key) and value is not None:
                    problems.append(refusal)
                continue
            if matched is None:
                problems.append(f"{key} (your yaml) is not a key of upstream v0.7's {section} section nor of this "
                                "schema; check the spelling (docs/reward_loop.md lists the v0.7 keys).")
                continue
            entry, ours = matched
            legacy = section in ("sandbox_fusion", "reward_model")  # v0.7's legacy blocks: null is unset
            have = current(ours)
            run = _shipped_mirror(key) if have is None else have  # unset vLLM argument: the engine's own value
            if value == MISSING or value == _v07_default(entry, key) or (legacy and value is None):
                # v0.7's default (or null in its legacy block): not written. Said aloud where the run's differs
                if not legacy and value not in (MISSING, None) and run != value:
                    kept.append(f"{key}={value!r} (v0.7's default) is taken as unset: the run uses {run!r} ({ours})")
                continue
            if value == run:
                continue  # already the value the run uses (a mirror written back as a plain value)
            if implies_loop(key):
                loop_by = loop_by or key
            if ours in from_command_line:
                continue
            if have is not None and have != _our_default(ours) and ours not in writes:
                problems.append(f"{key}={value!r} (upstream v0.7's spelling, your yaml) and {ours}={have!r} set the "
                                "same key to different values; give it once.")
                continue
            writes[ours] = value
    if loop_by is not None and current(LOOP_SWITCH) is not True:
        if LOOP_SWITCH in from_command_line:
            problems.append(f"{loop_by} is read by the reward loop, which upstream v0.7 always runs; it cannot be "
                            f"given with {LOOP_SWITCH}=false: drop one of them.")
        else:
            writes[LOOP_SWITCH] = True
    if kept:  # a section copied from upstream's yaml carries v0.7's defaults, which are not this schema's
        warnings.warn("your yaml's reward section: " + "; ".join(kept) + ". Set the key to another value (or "
                      "give our key) to change it (docs/reward_loop.md).", ConfigWarning, stacklevel=2)
    source = writes.get(SOURCE_KEY, current(SOURCE_KEY))
    if source == "importlib" and REGISTERED_KEY in writes:  # v0.7: name is the class in module.path
        problem = importlib_class_problem(writes[REGISTERED_KEY], writes.get(CLASS_NAME, current(CLASS_NAME)))
        if problem:
            problems.append(problem)
        else:
            writes[CLASS_NAME] = writes.pop(REGISTERED_KEY)
    return writes, problems


def module_name_note(value: Any) -> str:
    return (f"{MODULE_NAME}={value!r} names the module the file is imported as; upstream's loader and this build load "
            "the file by path and take the class from reward.reward_manager.name, so it changes nothing")


def importlib_class_problem(name: Any, class_name: Any) -> str | None:
    """With source=importlib v0.7's reward.reward_manager.name names the class (reward_model.reward_loop_class_name
    here); None when that agrees with a class name given in our spelling."""
    if class_name in (None, name):
        return None
    return (f"reward.reward_manager.name={name!r} (the class in module.path, as source=importlib reads it) and "
            f"{CLASS_NAME}={class_name!r} name different classes; give one.")


# `_target_` spellings upstream's yamls use in the reward section (v0.7's, then later upstream's): the section is
# always built with this schema's classes (verl.workers.config.reward), so these are accepted and any other refused
KNOWN_TARGETS = frozenset({
    "verl.workers.config.RewardConfig", "verl.workers.config.reward.RewardConfig",
    "verl.workers.config.reward_model.RewardManagerConfig", "verl.workers.config.reward.RewardManagerConfig",
    "verl.trainer.config.config.ModuleConfig", "verl.workers.config.RewardModelConfig",
    "verl.workers.config.reward.RewardModelConfig", "verl.workers.config.RolloutConfig",
    "verl.workers.config.SandboxFusionConfig", "verl.workers.config.reward.SandboxFusionConfig",
})


def _shipped_reward() -> dict[str, Any]:
    """The shipped `reward` section, unresolved: each leaf the mirror of one of our keys (or v0.7's fixed value)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(_generated().reward, resolve=False)


def _written_reward(node: Any, problems: list[str]) -> dict[str, Any]:
    """The leaves of `node.reward` a user's yaml changed from the shipped mirrors (resolved), as a nested dict."""
    from omegaconf import OmegaConf

    section = node.get("reward")
    if not OmegaConf.is_config(section):
        return {}  # absent or `reward: null`: nothing written
    shipped = dict(walk_keys(_shipped_reward()))
    written: dict[str, Any] = {}
    for key, raw in walk_keys(OmegaConf.to_container(section, resolve=False, throw_on_missing=False)):
        if isinstance(raw, dict) and raw:
            continue  # walk_keys yields sections too; their leaves follow
        if key in shipped and shipped[key] == raw:
            continue
        if key.rpartition(".")[2] == TARGET_KEY:
            if raw not in KNOWN_TARGETS and raw is not None:
                problems.append(f"reward.{key}={raw!r} (your yaml): the reward section is built as this schema's "
                                "verl.workers.config.reward classes (it mirrors reward_model.*); remove the key.")
            continue
        value = OmegaConf.select(node, f"reward.{key}", throw_on_missing=False)
        if OmegaConf.is_config(value):
            value = OmegaConf.to_container(value, resolve=True)
        _put(written, key, value)
    return written


def _put(tree: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted `key` in a nested dict, making the sections on the way (a mirror where a section is edited,
    `engine_kwargs: ${...}`, becomes that section)."""
    *parents, leaf = key.split(".")
    for part in parents:
        if not isinstance(tree.get(part), dict):
            tree[part] = {}
        tree = tree[part]
    tree[leaf] = value


def typed_reward_section(reward: dict[str, Any], as_built: dict[str, Any] | None) -> dict[str, Any]:
    """The `reward` section to compose from a typed config's `reward` (its to_dict()): the shipped mirrors, with
    the leaves a user changed in Python since the config was checked (`as_built`, that check's values; None: a
    config never checked, compared with the class defaults) written over them, so they are folded like a yaml's.
    A mirror left as it was is not written: it may be stale after an edit of the key it mirrors."""
    from verl.workers.config.reward import RewardConfig

    before = dict(walk_keys(as_built if as_built is not None else RewardConfig().to_dict()))
    section = _shipped_reward()
    for key, value in walk_keys(reward):
        if isinstance(value, dict) and value or before.get(key, object()) == value:
            continue
        _put(section, key, value)
    return section


def _legacy_rollout_keys(node: Any) -> dict[str, Any]:
    """v0.7's legacy `reward_model.rollout` judge-engine keys a user's yaml set (declared null here: null is unset)."""
    from omegaconf import OmegaConf

    rollout = OmegaConf.select(node, "reward_model.rollout", default=None)
    if rollout is None:
        return {}
    body = OmegaConf.to_container(rollout, resolve=True)
    return {k: body[k] for k in (*VLLM_ARGS, *REFUSED_ROLLOUT) if body.get(k) is not None}


def _legacy_sandbox(node: Any) -> dict[str, Any]:
    from omegaconf import OmegaConf

    section = node.get("sandbox_fusion")
    if not OmegaConf.is_config(section):
        return {}
    return {k: v for k, v in OmegaConf.to_container(section, resolve=True).items() if v is not None}


def fold_reward_section(node: Any) -> tuple[dict[str, Any], list[str]]:
    """On the composed config, before typing: what a user's yaml wrote in v0.7's `reward:` section, its legacy
    top-level `sandbox_fusion:` and legacy `reward_model.rollout.*` judge keys, moved onto our keys. Afterwards the
    `reward` section is the shipped mirrors again (so it reads as the values the run uses) and the legacy keys are
    null. Returns (the writes for the caller's config, problems)."""
    from omegaconf import OmegaConf, open_dict, read_write

    problems: list[str] = []
    sections: dict[str, Any] = {}
    written = _written_reward(node, problems)
    if written:
        sections["reward"] = written
    legacy_sandbox = _legacy_sandbox(node)
    if legacy_sandbox:
        sections["sandbox_fusion"] = legacy_sandbox
    legacy = _legacy_rollout_keys(node)
    if legacy:  # after `reward`: a legacy key written with its `reward.*` twin wins, as in upstream's migration
        sections["reward_model"] = {"rollout": legacy}
    writes: dict[str, Any] = {}
    if sections:
        writes, fold_problems = fold_plan(sections, lambda key: OmegaConf.select(node, key, default=None),
                                          command_line_keys())
        problems += fold_problems
    with read_write(node), open_dict(node):
        node["reward"] = _shipped_reward()
        if "sandbox_fusion" in node or legacy_sandbox:
            node["sandbox_fusion"] = {"url": None, "max_concurrent": None, "memory_limit_mb": None}
        for key in legacy:
            node.reward_model.rollout[key] = None
        for key, value in writes.items():
            OmegaConf.update(node, key, value, merge=False, force_add=True)
    return writes, problems
