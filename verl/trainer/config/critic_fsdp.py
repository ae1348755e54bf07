"""`critic.fsdp` and `critic.model.fsdp_config`: the critic's FSDP engine in both of upstream's places, one setting.

Upstream v0.7 keeps the critic's engine in `critic.model.fsdp_config`; later upstream moved it to `critic.fsdp` (the
critic's model section became the actor's HFModelConfig). Both sections are declared here (the same engine file,
engine/fsdp.yaml) and the critic worker reads `critic.model.fsdp_config`. Before the config is typed, each leaf is
settled as the other engine mirrors are (verl.trainer.config.engine_mirror):

- both equal: nothing to do;
- one changed from the shipped default: it applies, and is copied onto the other;
- both changed to different values: refused, naming both.

So a command line, a yaml or a Python dict in either spelling sets the critic's engine, and `cfg.critic.fsdp`
reads what the worker uses.
"""

from __future__ import annotations

import functools
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write

from verl.trainer.config.yaml_files import GENERATED, TARGET_KEY, walk_keys

NEW, OLD = "critic.fsdp", "critic.model.fsdp_config"
_MISSING = object()


@functools.cache
def _shipped() -> dict[str, Any]:
    """The engine section's shipped leaves (the critic's model.fsdp_config in the generated file), by dotted key."""
    raw = OmegaConf.to_container(OmegaConf.load(GENERATED), resolve=False)
    section = raw["critic"]["model"]["fsdp_config"]
    return {key: value for key, value in walk_keys(section)
            if not isinstance(value, dict) and key.rpartition(".")[2] != TARGET_KEY}


def _leaf(section: DictConfig, key: str) -> Any:
    value = OmegaConf.select(section, key, default=_MISSING)
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value


def fold_critic_fsdp(node: DictConfig) -> tuple[dict[str, Any], list[str]]:
    """Settle `critic.fsdp` against `critic.model.fsdp_config` in ``node`` (the composed config, before typing).
    Returns ({dotted key: value} written, problems)."""
    critic = node.get("critic")
    if not isinstance(critic, DictConfig):
        return {}, []
    new, old = critic.get("fsdp"), (critic.get("model") or {}).get("fsdp_config")
    if not isinstance(new, DictConfig) or not isinstance(old, DictConfig):
        return {}, []
    writes: dict[str, Any] = {}
    problems: list[str] = []
    for key, default in _shipped().items():
        ours, theirs = _leaf(new, key), _leaf(old, key)
        if ours is _MISSING or theirs is _MISSING or ours == theirs:
            continue
        if theirs == default:
            writes[f"{OLD}.{key}"] = ours
        elif ours == default:
            writes[f"{NEW}.{key}"] = theirs
        else:
            problems.append(f"{NEW}.{key}={ours!r} and {OLD}.{key}={theirs!r} are the same setting (later upstream's "
                            f"place of the critic's engine and v0.7's); give one, or the same value to both.")
    if writes:
        with read_write(node), open_dict(node):
            for dotted, value in writes.items():
                OmegaConf.update(node, dotted, value, merge=False)
    return writes, problems
