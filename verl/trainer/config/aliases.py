"""Keys upstream renamed, accepted in both spellings as one setting.

Upstream v0.7 moved the reward settings to a top-level ``reward:`` section (``reward.sandbox_fusion``,
``reward.num_workers``, ``reward.reward_model.*``, ...; the table and its rules are in
verl.trainer.config.reward_section). A command line in either spelling sets the same key; giving both with
different values is an error rather than a silent winner. A ``reward.*`` key only the reward loop reads turns
``reward_model.use_reward_loop`` on, as upstream v0.7 always runs its loop.

Keys upstream users must append with `+` because upstream's yaml lacks them (e.g.
`+actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=bf16`) are declared in ours, where Hydra would
refuse the append ("Could not append to config"): such a `+key=value` sets the key instead.

The reverse holds for the engines' free-form `engine_kwargs` sections: older upstream yamls declared some of their
keys (`engine_kwargs.vllm.disable_mm_preprocessor_cache`, `swap_space`, `sglang.attention_backend`), so upstream's
example scripts set them without `+`, while newer yamls declare an empty section. Ours is empty too, so such a
`key=value` is appended; what the engine then does with the name is checked before Ray like any other engine kwarg
(`engine_kwargs_checks.py`).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from verl.trainer.config import reward_section
from verl.trainer.config.yaml_files import yaml_keys
from verl.utils.config_errors import ConfigError, ConfigWarning

# free-form sections whose undeclared keys are appended even when written without `+`
APPENDED_WITHOUT_PLUS = ("actor_rollout_ref.rollout.engine_kwargs.", "reward_model.rollout.engine_kwargs.")

# our own keys that only the reward loop reads: upstream ran its loop by default once these keys existed (and v0.7
# always runs it), so its scripts set them without reward_model.use_reward_loop; written so, they imply it
LEGACY_LOOP_KEYS = ("reward_model.num_workers", "reward_model.max_concurrency_per_worker",
                    "reward_model.reward_loop_source", "reward_model.reward_loop_module_path",
                    "reward_model.reward_loop_class_name", "reward_model.rollout.name")
_UNSET = ("null", "none", "~", "")

# new spelling (prefix) -> the key this schema has
KEY_ALIASES: dict[str, str] = {
    # older upstream's per-role nsys option (verl.trainer.config.deprecated); the rollout's follows the actor's
    "actor_rollout_ref.actor.profiler.discrete": "actor_rollout_ref.actor.profiler.tool_config.nsys.discrete",
    "actor_rollout_ref.rollout.profiler.discrete": "actor_rollout_ref.actor.profiler.tool_config.nsys.discrete",
    "actor_rollout_ref.ref.profiler.discrete": "actor_rollout_ref.ref.profiler.tool_config.nsys.discrete",
    "critic.profiler.discrete": "critic.profiler.tool_config.nsys.discrete",
}


def _split(override: str) -> tuple[str, str, str] | None:
    """(plus-prefix, key, value) of a `key=value` override, or None for anything else (flags, deletes)."""
    if override.startswith(("-", "~")) or "=" not in override:
        return None
    key, value = override.split("=", 1)
    plus = key[: len(key) - len(key.lstrip("+"))]
    return plus, key[len(plus):], value


def _renamed(key: str) -> str | None:
    for new, old in KEY_ALIASES.items():
        if key == new or key.startswith(new + "."):
            return old + key[len(new):]
    # v0.7's reward keys are declared (reward/reward.yaml mirrors ours, its legacy keys are null) but set ours
    matched = reward_section.v07_key(key)
    return None if matched is None else matched[1]


def _declared(key: str) -> bool:
    return key in yaml_keys()


def rewrite_aliases(overrides: Sequence[str]) -> list[str]:
    """The overrides with every aliased key in this schema's spelling (a `+` is dropped: the key exists)."""
    out: list[str] = []
    seen: dict[str, tuple[str, str]] = {}  # canonical key -> (value, as written)
    problems: list[str] = []
    loop_by: str | None = None  # the first v0.7 key that implies the reward loop
    legacy_loop_by: str | None = None  # the first of our loop-only keys (LEGACY_LOOP_KEYS) that is set
    for override in overrides:
        parts = _split(override)
        if parts is None:
            out.append(override)
            continue
        plus, key, value = parts
        if key == reward_section.MODULE_NAME:  # read by nothing, upstream's loader included: said, and dropped
            if value.strip().strip("'\"") not in (*_UNSET, reward_section.V07_CLASS_NAME):
                warnings.warn(reward_section.module_name_note(value) + ".", ConfigWarning, stacklevel=2)
            continue
        refusal = reward_section.refused_rollout_key(key)
        if refusal is not None:
            problems.append(refusal)
            continue
        canonical = _renamed(key)
        written = key
        if canonical is not None:
            if key.startswith("reward.") and reward_section.implies_loop(key):
                loop_by = loop_by or key
            key = canonical
        elif key in LEGACY_LOOP_KEYS and value.strip().lower() not in _UNSET:
            legacy_loop_by = legacy_loop_by or f"{written}={value}"
        if plus == "+" and _declared(key):
            plus = ""  # upstream's yaml lacks the key, so its users append it; ours declares it: set it instead
        elif plus == "" and key.startswith(APPENDED_WITHOUT_PLUS) and not _declared(key):
            plus = "+"  # an engine kwarg older upstream yamls declared (see the module docstring)
        if key in seen and seen[key][0] != value and seen[key][1] != written:
            problems.append(f"{seen[key][1]}={seen[key][0]} and {written}={value} set the same key ({key}) to "
                            "different values; give it once.")
        seen[key] = (value, written)
        out.append(plus + key + "=" + value)
    out += _v07_implied(seen, loop_by, problems, out)
    if loop_by is None and legacy_loop_by is not None and reward_section.LOOP_SWITCH not in seen:
        warnings.warn(f"{legacy_loop_by} is read by the reward loop only, which upstream runs by default (v0.7 "
                      f"always): {reward_section.LOOP_SWITCH}=true is implied; write it to keep this line quiet.",
                      ConfigWarning, stacklevel=2)
        out.append(f"{reward_section.LOOP_SWITCH}=true")
    if problems:
        raise ConfigError(problems)
    return out


def _v07_implied(seen: dict[str, tuple[str, str]], loop_by: str | None, problems: list[str],
                 out: list[str]) -> list[str]:
    """What upstream v0.7 implies for its `reward.*` keys: its reward loop (always on there); and with
    source=importlib, `reward.reward_manager.name` is the class in module.path (rewritten in ``out``)."""
    implied: list[str] = []
    switch = reward_section.LOOP_SWITCH
    if loop_by is not None:
        if switch not in seen:
            implied.append(f"{switch}=true")
        elif seen[switch][0].lower() != "true":
            problems.append(f"{loop_by} is read by the reward loop, which upstream v0.7 always runs; it cannot be "
                            f"given with {seen[switch][1]}={seen[switch][0]}: drop one of them.")
    source, name = seen.get(reward_section.SOURCE_KEY), seen.get(reward_section.REGISTERED_KEY)
    if source and source[0] == "importlib" and name and name[1] == "reward.reward_manager.name":
        given = seen.get(reward_section.CLASS_NAME)
        problem = reward_section.importlib_class_problem(name[0], given[0] if given else None)
        if problem:
            problems.append(problem)
        else:
            prefix = reward_section.REGISTERED_KEY + "="
            out[:] = [o for o in out if not o.lstrip("+").startswith(prefix)]
            implied.append(f"{reward_section.CLASS_NAME}={name[0]}")
    return implied
