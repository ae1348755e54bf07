"""A whole run with rollout.mode=async: upstream's multi-turn GSM8K rows (tool agent, Gsm8kTool, an interaction)
through Ray, the agent loop on the HF engine, GRPO on a tiny random model. A random model rarely writes a tool
call, so this checks the wiring (rows' fields reach the loops, the turn metrics come back, masks reach the
update); the tool-calling behaviour itself is tested on a scripted engine in tests/workers/rollout/agent_loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, make_tiny_model_dir, tiny_run_overrides

pytestmark = pytest.mark.e2e  # ~40 s


def _gsm8k_multiturn_data(out: Path) -> Path:
    sample = out / "gsm8k_layout"
    subprocess.run([sys.executable, str(REPO / "examples/data_preprocess/gsm8k_layout_sample.py"), "--out", str(sample),
                    "--train_size", "16", "--test_size", "4"], check=True, capture_output=True)
    subprocess.run([sys.executable, str(REPO / "examples/data_preprocess/gsm8k_multiturn_w_tool.py"),
                    "--local_dataset_path", str(sample), "--local_save_dir", str(out)], check=True,
                   capture_output=True)
    return out


def test_async_multi_turn_run_logs_turn_metrics(tmp_path: Path) -> None:
    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import run_training

    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = _gsm8k_multiturn_data(tmp_path / "data")
    config_dir = REPO / "examples/sglang_multiturn/config"
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", n_workers=1) + [
        "data.max_prompt_length=512", "data.max_response_length=24", "data.return_raw_chat=true",
        "actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={config_dir / 'tool_config/gsm8k_tool_config.yaml'}",
        "actor_rollout_ref.rollout.multi_turn.interaction_config_path="
        f"{config_dir / 'interaction_config/gsm8k_interaction_config.yaml'}",
        "actor_rollout_ref.rollout.agent.num_workers=2",
        "trainer.total_training_steps=1", "trainer.val_before_train=true",
    ]
    import ray

    try:
        run_training(validate_config(load_config(overrides)))
    finally:
        ray.shutdown()  # the next whole-run test starts its own cluster (and its own placement groups)
    rows = [json.loads(line) for line in (tmp_path / "run/report/metrics.jsonl").read_text().splitlines()]
    train = next(r for r in rows if "agent/num_turns/mean" in r)
    # system + user + at least one assistant turn; the interaction answers every turn without a tool call
    assert train["agent/num_turns/mean"] >= 3
    assert train["agent/response_model_tokens/mean"] > 0
    assert "agent/tool_calls/mean" in train and "agent/tool_errors/mean" in train
    val = next(r for r in rows if "val-aux/agent/num_turns/mean" in r)
    assert "val-core/openai/gsm8k/reward/mean@1" in val
    assert all(k not in train for k in ("__num_turns__",))
