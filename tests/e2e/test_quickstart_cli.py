"""Upstream verl's quickstart (PPO with a critic on GSM8K) runs here unchanged apart from paths and sizes:
the same `python -m verl.trainer.main_ppo` keys, GSM8K converted by examples/data_preprocess/gsm8k.py from the
hub's parquet layout, a tiny random model in place of Qwen2.5-0.5B-Instruct, one worker process on CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.e2e import REPO, make_tiny_model_dir

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]

QUESTIONS = [("Tom has 3 apples and buys 4 more. How many apples does he have?", "3+4=<<3+4=7>>7\n#### 7"),
             ("A box holds 6 pens. How many pens are in 2 boxes?", "6*2=<<6*2=12>>12\n#### 12"),
             ("Sara had 10 sweets and ate 3. How many are left?", "10-3=<<10-3=7>>7\n#### 7"),
             ("There are 5 cats with 4 legs each. How many legs?", "5*4=<<5*4=20>>20\n#### 20")]


def _gsm8k_hub_layout(root: Path) -> Path:
    (root / "main").mkdir(parents=True)
    rows = [{"question": q, "answer": a} for q, a in QUESTIONS]
    for split in ("train", "test"):
        pq.write_table(pa.Table.from_pylist(rows), str(root / "main" / f"{split}-00000-of-00001.parquet"))
    return root


def test_quickstart_ppo_command_line(tmp_path: Path) -> None:
    model = make_tiny_model_dir(tmp_path / "model")
    data = tmp_path / "data" / "gsm8k"
    subprocess.run([sys.executable, "examples/data_preprocess/gsm8k.py",
                    f"--local_dataset_path={_gsm8k_hub_layout(tmp_path / 'hub')}", f"--local_save_dir={data}"],
                   cwd=REPO, check=True, capture_output=True)
    command = [
        sys.executable, "-m", "verl.trainer.main_ppo",
        f"data.train_files={data / 'train.parquet'}", f"data.val_files={data / 'test.parquet'}",
        "data.train_batch_size=4", "data.max_prompt_length=256", "data.max_response_length=16",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.actor.optim.lr=1e-6", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2",
        "critic.optim.lr=1e-5", f"critic.model.path={model}", "critic.ppo_micro_batch_size_per_gpu=1",
        "algorithm.kl_ctrl.kl_coef=0.001", "trainer.logger=console", "trainer.console_format=full", "trainer.val_before_train=False",
        "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.save_freq=10", "trainer.test_freq=10",
        "trainer.total_epochs=1", f"trainer.default_local_dir={tmp_path / 'run'}",
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # one epoch of 4 prompts at 4 per step: a single step, logged as upstream's console line
    step_lines = [line for line in result.stdout.splitlines() if line.startswith("step:1 - ")]
    assert len(step_lines) == 1, result.stdout[-3000:]
    for key in ("critic/vf_loss:", "actor/pg_loss:", "critic/score/mean:", "timing_s/update_critic:", "val-core/"):
        assert key in step_lines[0], key
