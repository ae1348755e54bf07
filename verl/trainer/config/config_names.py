"""Upstream config names for engines this build does not have, refused in our terms before Hydra looks for them.

`--config-name=ppo_megatron_trainer` (or a user's yaml whose `defaults:` load it, as upstream's multi-turn
Megatron examples do) would otherwise stop in Hydra with "Cannot find primary config" and exit 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf

from verl.trainer.config.yaml_files import CONFIG_DIR

# config name -> (what it selects, what to use here)
GPU_ONLY_CONFIGS: dict[str, tuple[str, str]] = {
    "ppo_megatron_trainer": (
        "upstream's Megatron-LM trainer (Megatron-Core tensor, pipeline and expert parallelism on NVIDIA GPUs), "
        "which is not built here",
        "Use the default config (--config-name=ppo_trainer, FSDP2: actor_rollout_ref.actor.strategy=fsdp2); "
        "ulysses_sequence_parallel_size splits long sequences, model.lora_rank trains an adapter "
        "(docs/migration.md, docs/scaling.md).",
    ),
}
_NAME_FLAGS = ("--config-name", "-cn")
_PATH_FLAGS = ("--config-path", "-cp")
_MAX_DEPTH = 8


def _flag_value(flags: Sequence[str], names: tuple[str, ...]) -> str | None:
    value = None
    for i, flag in enumerate(flags):
        name, eq, rest = flag.partition("=")
        if name in names:
            value = rest if eq else (flags[i + 1] if i + 1 < len(flags) else None)
    return value


def _stem(name: str) -> str:
    return name[: -len(".yaml")] if name.endswith(".yaml") else name


def _find(name: str, folders: Sequence[Path]) -> Path | None:
    for folder in folders:
        path = folder / f"{name}.yaml"
        if path.is_file():
            return path
    return None


def _loaded_names(path: Path, folders: Sequence[Path], depth: int = 0) -> list[str]:
    """Config names a yaml loads through its `defaults:` list (plain `- name` entries), recursively."""
    if depth > _MAX_DEPTH:
        return []
    try:
        node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    except Exception:  # an unreadable yaml: Hydra reports it with its own message
        return []
    defaults = node.get("defaults") if isinstance(node, dict) else None
    names: list[str] = []
    for entry in defaults if isinstance(defaults, list) else []:
        if not isinstance(entry, str) or entry == "_self_":
            continue
        name = _stem(entry.split("@", 1)[0].lstrip("/"))
        names.append(name)
        child = _find(name, [path.parent, *folders])
        if child is not None and name not in GPU_ONLY_CONFIGS:
            names += _loaded_names(child, folders, depth + 1)
    return names


def gpu_only_config_problem(flags: Sequence[str], cwd: Path | None = None) -> str | None:
    """The refusal for a `--config-name` that is (or loads) a GPU-only upstream config, or None."""
    name = _flag_value(flags, _NAME_FLAGS)
    if not name:
        return None
    name = _stem(name)
    if name in GPU_ONLY_CONFIGS:
        why, todo = GPU_ONLY_CONFIGS[name]
        return f"--config-name={name} selects {why}. {todo}"
    cwd = cwd or Path.cwd()
    folder = _flag_value(flags, _PATH_FLAGS)
    folders = [CONFIG_DIR]
    if folder:
        # Hydra reads a relative --config-path from the entry point's folder; users often mean the working directory
        folders = [cwd / folder, CONFIG_DIR.parent / folder, Path(folder), CONFIG_DIR]
    path = _find(name, folders)
    if path is None:
        return None
    for loaded in _loaded_names(path, folders):
        if loaded in GPU_ONLY_CONFIGS:
            why, todo = GPU_ONLY_CONFIGS[loaded]
            return f"--config-name={name} ({path}) loads {loaded} through its defaults, which selects {why}. {todo}"
    return None
