"""Checking command-line override keys before Hydra sees them.

Hydra rejects an unknown key with "Key 'x' is not in struct" and no hint. Checking the keys against the
schema first lets a typo be answered with the key the user meant, in well under a second.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from verl.trainer.config.config_names import gpu_only_config_problem
from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.trainer.config.yaml_files import TARGET_KEY, yaml_keys
from verl.utils.config_keys import unknown_key_message
from verl.utils.config_schema import schema_keys

# Hydra's own command-line flags that take a value as the next argument (see `python -m ... --hydra-help`).
_FLAGS_WITH_VALUE = {
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--config-dir",
    "-cd",
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--experimental-rerun",
}
_INFO_CHOICES = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}
_HELP_FLAGS = {"--help", "-h", "--hydra-help", "--version", "--shell-completion", "-sc", "--experimental-rerun"}


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(Hydra flags, overrides) from a command line, the way Hydra's parser splits them."""
    flags: list[str] = []
    overrides: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-"):
            flags.append(arg)
            name = arg.split("=", 1)[0]
            takes_value = name in _FLAGS_WITH_VALUE or (
                name in {"--info", "-i"} and i + 1 < len(args) and args[i + 1] in _INFO_CHOICES
            )
            if takes_value and "=" not in arg and i + 1 < len(args):
                flags.append(args[i + 1])
                i += 1
        else:
            overrides.append(arg)
        i += 1
    return flags, overrides


def _key_of(override: str) -> tuple[str, str] | None:
    """(kind, dotted key) of one override; kind is 'change', 'add' or 'skip'."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        (parsed,) = OverridesParser.create().parse_overrides([override])
    except HydraException:
        return None  # malformed: Hydra reports it with the grammar's own message
    if parsed.is_delete() or parsed.is_hydra_override() or parsed.package is not None:
        return None
    return ("add" if parsed.is_add() or parsed.is_force_add() else "change"), parsed.key_or_group


def _strip_index(key: str) -> str:
    """`trainer.logger.0` -> `trainer.logger`: list items are addressed by position."""
    parts = key.split(".")
    while len(parts) > 1 and parts[-1].isdigit():
        parts.pop()
    return ".".join(parts)


def unknown_override_problems(overrides: Sequence[str], schema: type = PPOTrainerConfig) -> list[str]:
    """One message per override whose key the schema does not define."""
    known, free_form = schema_keys(schema)
    problems = []
    for override in overrides:
        parsed = _key_of(override)
        if parsed is None:
            continue
        kind, key = parsed
        key = _strip_index(key)
        if key in known:
            continue
        parent, _, leaf = key.rpartition(".")
        if leaf == TARGET_KEY and (parent == "" or parent in known):
            continue  # a section's class (checked when the section is built)
        section = next((f for f in free_form if key.startswith(f + ".")), None)
        if section is not None:
            if kind == "change" and key not in yaml_keys():
                problems.append(
                    f"'{key}' is not in the default config; '{section}' takes any keys, so add it with '+{override}'."
                )
            continue
        problems.append(unknown_key_message(key, known))
    return problems


def prepare_argv(argv: Sequence[str]) -> list[str]:
    """The command line with renamed keys in this schema's spelling (aliases.py), then `precheck_argv`'d."""
    from verl.trainer.config.aliases import rewrite_aliases
    from verl.utils.config_errors import ConfigError

    try:
        argv = rewrite_aliases(argv)
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        sys.exit(2)
    precheck_argv(argv)
    return argv


def precheck_argv(argv: Sequence[str]) -> None:
    """Exit with status 2 and a suggestion when the command line names a key that does not exist, or a GPU-only
    upstream config (--config-name=ppo_megatron_trainer) that this build does not have."""
    flags, overrides = split_argv(argv)
    if any(f.split("=", 1)[0] in _HELP_FLAGS for f in flags):
        return
    refusal = gpu_only_config_problem(flags)
    if refusal is not None:  # before Hydra, which would only say "Cannot find primary config"
        print(refusal, file=sys.stderr)
        sys.exit(2)
    problems = unknown_override_problems(overrides)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        sys.exit(2)
