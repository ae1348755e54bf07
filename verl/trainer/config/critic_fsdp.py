"""`critic.fsdp` and `critic.model.fsdp_config`: the critic's FSDP engine in both of upstream's places, one setting.

Upstream v0.7 keeps the critic's engine in `critic.model.fsdp_config`; later upstream moved it to `critic.fsdp` (the
critic's model section became the actor's HFModelConfig). Both sections are declared here (the same engine file,
engine/fsdp.yaml) and the critic worker reads `critic.model.fsdp_config`. Before the config is typed, each leaf is
settled as the other engine mirrors are (verl.trainer.config.engine_mirror):

- `critic.fsdp` at the shipped default, or equal: nothing to do;
- `critic.fsdp` changed, `model.fsdp_config` at the default: it applies (copied onto model.fsdp_config);
- both changed to different values: refused, naming both.

Then `critic.fsdp` goes back to the shipped defaults in the composed config (so checking it again does not take the
old value for a new setting), and in the typed config it is the same object as `critic.model.fsdp_config`. So a
command line, a yaml or a Python dict in either spelling sets the critic's engine, and `cfg.critic.fsdp` reads what
the worker uses.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write

from verl.trainer.config.yaml_files import GENERATED, TARGET_KEY, walk_keys

NEW, OLD = "critic.fsdp", "critic.model.fsdp_config"
_MISSING = object()


@functools.cache
def _shipped_raw() -> dict[str, Any]:
    return OmegaConf.to_container(OmegaConf.load(GENERATED), resolve=False)["critic"]["model"]["fsdp_config"]


def _shipped_section() -> dict[str, Any]:
    """The engine section as shipped (the critic's model.fsdp_config in the generated file), a fresh copy: the file
    is read once per process, not at every check."""
    return copy.deepcopy(_shipped_raw())


@functools.cache
def _shipped() -> dict[str, Any]:
    """The engine section's shipped leaves, by dotted key."""
    return {key: value for key, value in walk_keys(_shipped_section())
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
        if ours is _MISSING or theirs is _MISSING or ours == theirs or ours == default:
            continue
        if theirs == default:
            writes[f"{OLD}.{key}"] = ours
        else:
            problems.append(f"{NEW}.{key}={ours!r} and {OLD}.{key}={theirs!r} are the same setting (later upstream's "
                            f"place of the critic's engine and v0.7's); give one, or the same value to both.")
    with read_write(node), open_dict(node):
        for dotted, value in writes.items():
            OmegaConf.update(node, dotted, value, merge=False)
        # critic.fsdp goes back to the shipped defaults: what it set now lives in model.fsdp_config, and a later check
        # of the same config must not take a leftover copy for a new setting (the typed config reads
        # critic.fsdp as model.fsdp_config: share_critic_engine)
        node.critic.fsdp = _shipped_section()
    return writes, problems


def share_critic_engine(typed: Any) -> None:
    """After typing: `critic.fsdp` is the same object as `critic.model.fsdp_config`, what the worker reads."""
    critic = getattr(typed, "critic", None)
    model = getattr(critic, "model", None)
    if critic is not None and hasattr(critic, "fsdp") and hasattr(model, "fsdp_config"):
        object.__setattr__(critic, "fsdp", model.fsdp_config)
