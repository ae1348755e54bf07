"""Command-line checks shared by the SFT, generation and evaluation entry points, run before Hydra.

Keys are checked against the dataclass schema (as verl/trainer/config/overrides.py does for main_ppo), so a typo
is answered with the key the user meant. Upstream's SFT examples write `+data.prompt_dict_keys=[...]` (older yaml
lacked the key) while newer ones write `data.prompt_dict_keys=[...]`; both must work here, so a `+` on a key the
schema defines is dropped. Keys under a free-form section (e.g. `model.override_config`) take any name, added
with `+` as usual.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from verl.trainer.config.overrides import split_argv
from verl.trainer.config.yaml_files import CONFIG_DIR, yaml_keys
from verl.utils.config_errors import ConfigError
from verl.utils.config_keys import unknown_key_message
from verl.utils.config_schema import schema_keys

__all__ = ["CONFIG_DIR", "CONFIG_ERROR_EXIT", "normalize_overrides", "precheck_argv", "exit_on_config_error"]

CONFIG_ERROR_EXIT = 2
_HELP_FLAGS = {"--help", "-h", "--hydra-help", "--version", "--shell-completion", "-sc"}


def _key(override: str) -> str:
    key = override.split("=", 1)[0].lstrip("+~")
    parts = key.split(".")
    while len(parts) > 1 and parts[-1].isdigit():  # list items: trainer.logger.0
        parts.pop()
    return ".".join(parts)


def normalize_overrides(argv: Sequence[str], schema: type, config_name: str) -> list[str]:
    """argv with `+key=` turned into `key=` for keys the schema has; ConfigError for keys it does not know."""
    known, free_form = schema_keys(schema)
    out: list[str] = []
    problems: list[str] = []
    for arg in argv:
        if arg.startswith("-") or "=" not in arg or arg.startswith("hydra."):
            out.append(arg)
            continue
        key = _key(arg)
        section = next((f for f in free_form if key.startswith(f + ".")), None)
        if section is not None:
            if not arg.startswith("+") and key not in yaml_keys(config_name):
                problems.append(f"'{key}' is not in the default config; '{section}' takes any keys, so add it "
                                f"with '+{arg}'.")
            elif arg.startswith("+") and not arg.startswith("++") and key in yaml_keys(config_name):
                arg = arg[1:]  # Hydra refuses to add a key the yaml already has
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


def exit_on_config_error(err: ConfigError) -> None:
    print(f"Invalid config:\n{err}", file=sys.stderr)
    sys.exit(CONFIG_ERROR_EXIT)


def precheck_argv(schema: type, config_name: str) -> None:
    """Rewrite sys.argv in place for Hydra, or print the problems and exit 2."""
    flags, _ = split_argv(sys.argv[1:])
    if any(f.split("=", 1)[0] in _HELP_FLAGS for f in flags):
        return
    try:
        sys.argv[1:] = normalize_overrides(sys.argv[1:], schema, config_name)
    except ConfigError as err:
        exit_on_config_error(err)
