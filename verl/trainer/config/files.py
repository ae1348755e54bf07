"""Checking that the local files and folders a run reads exist, before any worker starts.

Remote locations (hdfs://, s3://, ...) are fetched later and not checked; a model given as a hub id
(`Qwen/Qwen2.5-0.5B`, no leading / ~ or .) is resolved by transformers.
"""

from __future__ import annotations

import os

from verl.trainer.config.lora_checks import check_lora_files
from verl.trainer.config.ppo_trainer import PPOTrainerConfig


def _is_remote(path: str) -> bool:
    return "://" in path


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "~", "."))


def _missing(path: str) -> str | None:
    """The expanded path when it does not exist, else None."""
    expanded = os.path.expanduser(path)
    return None if os.path.exists(expanded) else expanded


def _shown(path: str, expanded: str) -> str:
    return f"'{expanded}'" if expanded == path else f"'{expanded}' (from '{path}')"


def _data_files(key: str, files: list[str] | None) -> list[str]:
    problems = []
    for i, path in enumerate(files or []):
        if _is_remote(path):
            continue
        expanded = _missing(path)
        if expanded is not None:
            where = key if len(files) == 1 else f"{key}[{i}]"
            problems.append(
                f"{where}: data file not found: {_shown(path, expanded)}. Create it first (e.g. "
                f"`python examples/data_preprocess/arithmetic.py` writes ~/data/arithmetic/train.parquet and "
                f"test.parquet) or set {key}=<path to a .parquet file>."
            )
    return problems


def _local_path(key: str, path: str | None, what: str, only_if_local_looking: bool = False) -> list[str]:
    if path is None or _is_remote(path) or (only_if_local_looking and not _looks_local(path)):
        return []
    expanded = _missing(path)
    if expanded is None:
        return []
    return [f"{key}: {what} not found: {_shown(path, expanded)}; set {key}=<existing path>."]


def check_files(cfg: PPOTrainerConfig) -> list[str]:
    problems = _data_files("data.train_files", cfg.data.train_files)
    problems += _data_files("data.val_files", cfg.data.val_files)
    model = cfg.actor_rollout_ref.model
    problems += _local_path("actor_rollout_ref.model.path", model.path, "model folder", only_if_local_looking=True)
    if cfg.use_critic and cfg.critic.model.path != model.path:
        problems += _local_path("critic.model.path", cfg.critic.model.path, "model folder", only_if_local_looking=True)
    if cfg.reward_model.enable:
        problems += _local_path(
            "reward_model.model.path", cfg.reward_model.model.path, "model folder", only_if_local_looking=True
        )
    problems += _local_path("data.tokenizer", cfg.data.tokenizer, "tokenizer", only_if_local_looking=True)
    for key, path, what in (("model.hf_config_path", model.hf_config_path, "model config folder"),
                            ("model.tokenizer_path", model.tokenizer_path, "tokenizer folder"),
                            ("ref.model.path", (cfg.actor_rollout_ref.ref.model or {}).get("path"), "model folder")):
        problems += _local_path(f"actor_rollout_ref.{key}", path, what, only_if_local_looking=True)
    problems += _local_path("custom_reward_function.path", cfg.custom_reward_function.path, "reward function file")
    problems += _local_path("data.custom_cls.path", cfg.data.custom_cls.path, "dataset class file")
    sampler = cfg.data.sampler
    if bool(sampler.class_path) != bool(sampler.class_name):
        given, missing = ("class_path", "class_name") if sampler.class_path else ("class_name", "class_path")
        problems.append(f"data.sampler.{given} is set but data.sampler.{missing} is not: a sampler needs both "
                        "(class_path: pkg://module or a python file; class_name: the class in it).")
    if sampler.class_path and not str(sampler.class_path).startswith("pkg://"):
        problems += _local_path("data.sampler.class_path", sampler.class_path, "sampler class file")
    rollout = cfg.actor_rollout_ref.rollout
    for key, path, what in (("multi_turn.tool_config_path", rollout.multi_turn.tool_config_path, "tool config"),
                            ("multi_turn.interaction_config_path", rollout.multi_turn.interaction_config_path,
                             "interaction config"),
                            ("agent.agent_loop_config_path", rollout.agent.agent_loop_config_path,
                             "agent loop config")):
        found = _local_path(f"actor_rollout_ref.rollout.{key}", path, f"{what} YAML")
        problems += found or _list_file_shape(f"actor_rollout_ref.rollout.{key}", path)
    function_tools = rollout.multi_turn.function_tool_path
    problems += _local_path("actor_rollout_ref.rollout.multi_turn.function_tool_path", function_tools,
                            "function tool file (Python)")
    if cfg.data.function_tool_path and cfg.data.function_tool_path != function_tools:
        problems += _local_path("data.function_tool_path", cfg.data.function_tool_path, "function tool file (Python)")
    if cfg.data.tool_config_path and cfg.data.tool_config_path != rollout.multi_turn.tool_config_path:
        found = _local_path("data.tool_config_path", cfg.data.tool_config_path, "tool config YAML")
        problems += found or _list_file_shape("data.tool_config_path", cfg.data.tool_config_path)
    problems += check_lora_files(cfg)
    return problems


# the top-level list each multi-turn file holds (what the loaders read after Ray, verl.utils.import_utils)
_LIST_FILES = {"tool_config_path": ("tools", "tool config", "class_name, config, tool_schema"),
               "interaction_config_path": ("interaction", "interaction config", "name, class_name, config")}


def _list_file_shape(key: str, path: str | None) -> list[str]:
    """A tool / interaction config that exists but does not hold its top-level list: refused now, not after Ray."""
    shape = _LIST_FILES.get(key.rsplit(".", 1)[-1])
    if not path or shape is None or _is_remote(path):
        return []
    from verl.utils.import_utils import load_yaml_list

    try:
        loaded = load_yaml_list(path, shape[0], shape[1], key, shape[2])
    except (OSError, ValueError) as exc:
        return [f"{key}: {exc}"]
    return _mcp_entries(key, path, loaded[shape[0]]) if shape[0] == "tools" else []


def _mcp_entries(key: str, path: str, entries: list) -> list[str]:
    """Each MCP tool entry's `mcp:` mapping and servers file, read now (no connection: servers may start later)."""
    from verl.utils.mcp.tool_entry import check_mcp_entry

    problems = []
    for index, entry in enumerate(entries):
        if isinstance(entry, dict) and str((entry.get("config") or {}).get("type", "native")).lower() == "mcp":
            try:
                check_mcp_entry(entry, f"{key}: tool config {path!r}, tools[{index}]")
            except (ImportError, ValueError) as exc:
                problems.append(str(exc))
    return problems
