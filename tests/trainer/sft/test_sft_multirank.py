"""Two ranks (torchrun, Ray workers) train exactly what one rank trains, and a 2-rank run resumes on 1 rank."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]


def launch(prefix: list[str], model_dir: str, files, out: Path, *overrides: str) -> None:
    train, _ = files
    cmd = prefix + ["-m", "verl.trainer.fsdp_sft_trainer", f"model.partial_pretrain={model_dir}",
                    f"data.train_files={train}", "data.val_files=null", "data.max_length=192",
                    "data.train_batch_size=4", "data.micro_batch_size_per_gpu=1", "optim.lr=1e-3",
                    "model.enable_gradient_checkpointing=false", "trainer.logger=[]",
                    f"trainer.default_local_dir={out}", *overrides]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    done = subprocess.run(cmd, cwd=out.parent, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def max_diff(a: Path, b: Path) -> float:
    x, y = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return max((x[k] - y[k]).abs().max().item() for k in x)


def test_two_torchrun_ranks_match_one_and_resume_on_one(tiny_model_dir, arithmetic_sft_files, tmp_path):
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node=2"]
    steps = ["trainer.total_training_steps=6", "trainer.save_freq=3"]  # step 3 is mid-epoch (4 steps per epoch)
    launch([sys.executable], tiny_model_dir, arithmetic_sft_files, tmp_path / "one", *steps)
    launch(torchrun, tiny_model_dir, arithmetic_sft_files, tmp_path / "two", *steps)
    assert max_diff(tmp_path / "one" / "global_step_6", tmp_path / "two" / "global_step_6") < 1e-6
    assert max_diff(tmp_path / "one" / "global_step_6", Path(tiny_model_dir)) > 1e-3  # it did train
    # the 2-rank run dies after step 3; one rank picks it up (sharded optimizer state and data position)
    (tmp_path / "resumed").mkdir()
    os.symlink(tmp_path / "two" / "global_step_3", tmp_path / "resumed" / "global_step_3")
    launch([sys.executable], tiny_model_dir, arithmetic_sft_files, tmp_path / "resumed", *steps)
    assert max_diff(tmp_path / "one" / "global_step_6", tmp_path / "resumed" / "global_step_6") < 1e-6


def test_ray_workers_match_one_rank(tiny_model_dir, arithmetic_sft_files, tmp_path):
    steps = ["trainer.total_training_steps=2", "trainer.resume_mode=disable"]
    launch([sys.executable], tiny_model_dir, arithmetic_sft_files, tmp_path / "one", *steps)
    launch([sys.executable], tiny_model_dir, arithmetic_sft_files, tmp_path / "ray", *steps,
           "trainer.n_gpus_per_node=2", "ray_kwargs.ray_init.num_cpus=3")
    assert max_diff(tmp_path / "one" / "global_step_2", tmp_path / "ray" / "global_step_2") < 1e-6
