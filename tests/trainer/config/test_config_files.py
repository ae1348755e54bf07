"""Missing local files are named by key and path before a run starts; remote paths are left alone."""

from __future__ import annotations

import os

import pytest
import yaml

from verl.trainer.config import ConfigError, validate_config


def _problems(cfg) -> list[str]:
    with pytest.raises(ConfigError) as info:
        validate_config(cfg)
    return info.value.problems


@pytest.fixture
def runnable(cfg, local_run_files):
    cfg.data.train_files = local_run_files["train"]
    cfg.data.val_files = local_run_files["val"]
    cfg.actor_rollout_ref.model.path = local_run_files["model"]
    return cfg


def test_missing_train_file_is_named_by_key_and_path(runnable, tmp_path):
    missing = str(tmp_path / "nope" / "train.parquet")
    runnable.data.train_files = missing
    (problem,) = _problems(runnable)
    assert problem.startswith(f"data.train_files: data file not found: '{missing}'")


def test_home_relative_path_shows_both_forms(runnable):
    runnable.data.val_files = "~/surely/not/here.parquet"
    (problem,) = _problems(runnable)
    expanded = os.path.expanduser("~/surely/not/here.parquet")
    assert f"'{expanded}' (from '~/surely/not/here.parquet')" in problem and problem.startswith("data.val_files")


def test_each_entry_of_a_file_list_is_checked(runnable, local_run_files, tmp_path):
    runnable.data.val_files = [
        local_run_files["val"],
        "hdfs://cluster/data/val.parquet",
        str(tmp_path / "gone.parquet"),
    ]
    (problem,) = _problems(runnable)
    assert problem.startswith("data.val_files[2]: data file not found") and "gone.parquet" in problem


def test_model_folder_is_checked_only_when_it_is_a_local_path(runnable, tmp_path):
    runnable.actor_rollout_ref.model.path = "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id: transformers resolves it
    validate_config(runnable)
    runnable.actor_rollout_ref.model.path = str(tmp_path / "no_model")
    (problem,) = _problems(runnable)
    assert problem.startswith("actor_rollout_ref.model.path: model folder not found") and "no_model" in problem


def test_custom_reward_file_is_checked(runnable, tmp_path):
    runnable.custom_reward_function.path = str(tmp_path / "my_reward.py")
    (problem,) = _problems(runnable)
    assert problem.startswith("custom_reward_function.path: reward function file not found")


def test_file_checks_can_be_skipped(cfg):
    cfg.data.train_files = "/does/not/exist.parquet"
    validate_config(cfg, check_files=False)


@pytest.mark.parametrize(("key", "list_key"), [("tool_config_path", "tools"), ("interaction_config_path", "interaction")])
def test_a_multi_turn_file_without_its_list_is_refused_before_ray(runnable, tmp_path, key, list_key):
    # e.g. an MCP servers file given where the tool config belongs (one of upstream's scripts does)
    wrong = tmp_path / "servers.json"
    wrong.write_text('{"mcpServers": {"math": {"command": "python3", "args": ["math_api.py"]}}}')
    runnable.actor_rollout_ref.rollout.multi_turn.enable = True
    setattr(runnable.actor_rollout_ref.rollout.multi_turn, key, str(wrong))
    runnable.data.return_raw_chat = True
    (problem,) = _problems(runnable)
    assert problem.startswith(f"actor_rollout_ref.rollout.multi_turn.{key}: ")
    assert f"expected a top-level `{list_key}:` list" in problem and "servers.json" in problem
    right = tmp_path / "right.yaml"
    right.write_text(f"{list_key}: []\n")
    setattr(runnable.actor_rollout_ref.rollout.multi_turn, key, str(right))
    validate_config(runnable)


def test_an_mcp_tool_entry_and_its_servers_file_are_checked_before_ray(runnable, tmp_path):
    tools = tmp_path / "tools.yaml"
    entry = {"class_name": "verl.tools.mcp_search_tool.MCPSearchTool", "config": {"type": "mcp", "rate_limit": 120},
             "mcp": {"mcp_servers_config_path": str(tmp_path / "servers.json"), "tool_selected_list": ["search"]}}
    tools.write_text(yaml.safe_dump({"tools": [entry]}))
    runnable.actor_rollout_ref.rollout.multi_turn.enable = True
    runnable.actor_rollout_ref.rollout.multi_turn.tool_config_path = str(tools)
    runnable.data.return_raw_chat = True
    (problem,) = _problems(runnable)
    assert problem.startswith("actor_rollout_ref.rollout.multi_turn.tool_config_path: tool config")
    assert "tools[0]: mcp.mcp_servers_config_path: MCP servers file not found" in problem and "servers.json" in problem
    # the server is not started or reached by the check (it may start later): a command that does not exist passes
    (tmp_path / "servers.json").write_text('{"mcpServers": {"search": {"command": "no-such-mcp-server"}}}')
    validate_config(runnable)


def test_a_function_tool_file_is_checked_before_ray(runnable, tmp_path):
    arr = runnable.actor_rollout_ref
    arr.rollout.multi_turn.function_tool_path = str(tmp_path / "tools.py")
    problems = _problems(runnable)
    assert any(p.startswith("actor_rollout_ref.rollout.multi_turn.function_tool_path: function tool file") and
               "tools.py" in p for p in problems)
    assert any("function_tool_path / interaction_config_path are set but multi_turn.enable=false" in p
               for p in problems)
    (tmp_path / "tools.py").write_text("")
    arr.rollout.multi_turn.enable = True
    runnable.data.return_raw_chat = True
    runnable.data.function_tool_path = str(tmp_path / "tools.py")
    validate_config(runnable)
