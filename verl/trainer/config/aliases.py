"""Keys upstream renamed, accepted in both spellings as one setting.

Upstream v0.9 moved ``reward_model.sandbox_fusion`` to ``reward.sandbox_fusion``. A command line in either
spelling sets the same key; giving both with different values is an error rather than a silent winner.

Keys upstream users must append with `+` because upstream's yaml lacks them (e.g.
`+actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=bf16`) are declared in ours, where Hydra would
refuse the append ("Could not append to config"): such a `+key=value` sets the key instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from verl.trainer.config.yaml_files import yaml_keys
from verl.utils.config_errors import ConfigError

# new spelling (prefix) -> the key this schema has
KEY_ALIASES: dict[str, str] = {
    "reward.sandbox_fusion": "reward_model.sandbox_fusion",
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
    return None


def _declared(key: str) -> bool:
    return key in yaml_keys()


def rewrite_aliases(overrides: Sequence[str]) -> list[str]:
    """The overrides with every aliased key in this schema's spelling (a `+` is dropped: the key exists)."""
    out: list[str] = []
    seen: dict[str, tuple[str, str]] = {}  # canonical key -> (value, as written)
    problems: list[str] = []
    for override in overrides:
        parts = _split(override)
        if parts is None:
            out.append(override)
            continue
        plus, key, value = parts
        canonical = _renamed(key)
        written = key
        if plus == "+" and canonical is None and _declared(key):
            plus = ""  # upstream's yaml lacks the key, so its users append it; ours declares it: set it instead
        if canonical is not None:
            override = f"{canonical}={value}"
            key = canonical
        if key in seen and seen[key][0] != value and seen[key][1] != written:
            problems.append(f"{seen[key][1]}={seen[key][0]} and {written}={value} set the same key ({key}) to "
                            "different values; give it once.")
        seen[key] = (value, written)
        out.append(override if canonical is not None else plus + key + "=" + value)
    if problems:
        raise ConfigError(problems)
    return out
