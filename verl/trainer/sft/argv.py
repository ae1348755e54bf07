"""Command-line checks shared by the SFT, generation and evaluation entry points, run before Hydra.

Hydra answers a misspelt key with "Key 'x' is not in struct" and refuses `+key=value` for a key the yaml
already has. Upstream's SFT examples write `+data.prompt_dict_keys=[...]` (older yaml lacked the key) while
newer ones write `data.prompt_dict_keys=[...]`; both must work here, so a `+` on a key the yaml defines is
dropped, and an unknown key is reported with the closest valid one.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from verl.trainer.config.errors import ConfigError
from verl.trainer.config.keys import unknown_key_message

CONFIG_DIR = Path(__file__).resolve().parents[1] / "config"
CONFIG_ERROR_EXIT = 2


@functools.lru_cache(maxsize=8)
def yaml_keys(config_name: str) -> frozenset[str]:
    from omegaconf import OmegaConf

    def walk(node: dict, prefix: str) -> Iterable[str]:
        for key, value in node.items():
            yield prefix + str(key)
            if isinstance(value, dict):
                yield from walk(value, f"{prefix}{key}.")

    raw = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / f"{config_name}.yaml"), resolve=False)
    return frozenset(walk(raw, ""))


def _key(override: str) -> str:
    key = override.split("=", 1)[0].lstrip("+~")
    parts = key.split(".")
    while len(parts) > 1 and parts[-1].isdigit():  # list items: trainer.logger.0
        parts.pop()
    return ".".join(parts)


def normalize_overrides(argv: Sequence[str], config_name: str, free_form: Sequence[str] = ()) -> list[str]:
    """argv with `+key=` turned into `key=` for keys the yaml has; ConfigError for keys it does not know.

    Keys under a `free_form` section (e.g. `model.override_config`) may be added with `+` as usual.
    """
    known = yaml_keys(config_name)
    out: list[str] = []
    problems: list[str] = []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg or arg.startswith("hydra."):
            out.append(arg)
            continue
        key = _key(arg)
        if any(key == section or key.startswith(section + ".") for section in free_form):
            out.append(arg)
            continue
        if key not in known:
            problems.append(unknown_key_message(key, known))
            out.append(arg)
            continue
        if arg.startswith("+") and not arg.startswith("++"):
            arg = arg[1:]
        out.append(arg)
    if problems:
        raise ConfigError(problems)
    return out


def precheck_argv(config_name: str, free_form: Sequence[str] = ()) -> None:
    """Rewrite sys.argv in place for Hydra, or print the problems and exit 2."""
    try:
        sys.argv[1:] = normalize_overrides(sys.argv[1:], config_name, free_form)
    except ConfigError as err:
        print(f"Invalid config:\n{err}", file=sys.stderr)
        sys.exit(CONFIG_ERROR_EXIT)
