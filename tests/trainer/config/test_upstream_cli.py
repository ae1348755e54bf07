"""Upstream command lines through the real `python -m verl.trainer.main_ppo` entry: exit codes asserted.

- `+key=value` for a key upstream's yaml lacks (so its users append it) but ours declares sets the key instead of
  Hydra's "Could not append to config" (exit 1).
- `--config-name=ppo_megatron_trainer`, and a user's yaml that loads it, are refused in our terms with exit 2
  before Hydra ("Cannot find primary config", exit 1) and before Ray.
"""

from __future__ import annotations

import subprocess
import sys

from verl.trainer.config.aliases import rewrite_aliases
from verl.trainer.config.config_names import gpu_only_config_problem

REDUCE = "actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype"


def _main_ppo(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_plus_append_of_a_declared_key_sets_it(tmp_path):
    proc = _main_ppo(f"+{REDUCE}=bf16", "--cfg", "job", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Could not append" not in proc.stderr
    mixed = proc.stdout.split("mixed_precision:", 1)[1]
    assert "reduce_dtype: bf16" in mixed.split("ref:", 1)[0]  # the actor's section


def test_plus_append_reaches_the_config_check(tmp_path):
    """The whole pre-Ray check runs with the appended key: the only problem left is the data file we point away."""
    missing = tmp_path / "missing.parquet"
    proc = _main_ppo(f"+{REDUCE}=bf16", f"data.train_files={missing}", f"hydra.run.dir={tmp_path / 'h'}",
                     cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Could not append" not in proc.stderr and "Traceback" not in proc.stderr
    assert "data.train_files" in proc.stderr and "reduce_dtype" not in proc.stderr


def test_plus_is_kept_for_keys_we_do_not_declare():
    assert rewrite_aliases([f"+{REDUCE}=bf16", "+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4",
                            "++data.seed=3"]) == [
        f"{REDUCE}=bf16", "+actor_rollout_ref.rollout.engine_kwargs.vllm.swap_space=4", "++data.seed=3"]


def test_megatron_config_name_is_refused_with_exit_2(tmp_path):
    proc = _main_ppo("--config-name=ppo_megatron_trainer", "algorithm.adv_estimator=grpo", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Cannot find primary config" not in proc.stderr and "Traceback" not in proc.stderr
    assert "--config-name=ppo_megatron_trainer selects upstream's Megatron-LM trainer" in proc.stderr
    assert "NVIDIA GPUs" in proc.stderr and "ppo_trainer" in proc.stderr
    proc = _main_ppo("--config-name", "ppo_megatron_trainer", cwd=tmp_path)
    assert proc.returncode == 2


def test_user_yaml_loading_megatron_is_refused_with_exit_2(tmp_path):
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    # upstream's multi-turn examples: a folder of yaml files, one loading another that loads ppo_megatron_trainer
    (config_dir / "base_megatron.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\ndefaults:\n  - ppo_megatron_trainer\n  - _self_\n")
    (config_dir / "gsm8k_multiturn_megatron.yaml").write_text(
        "defaults:\n  - base_megatron\n  - _self_\ndata:\n  train_batch_size: 4\n")
    proc = _main_ppo("--config-path=config", "--config-name=gsm8k_multiturn_megatron", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Cannot find primary config" not in proc.stderr
    assert "--config-name=gsm8k_multiturn_megatron" in proc.stderr
    assert "loads ppo_megatron_trainer through its defaults" in proc.stderr


def test_fsdp_config_names_are_not_refused(tmp_path):
    assert gpu_only_config_problem([]) is None
    assert gpu_only_config_problem(["--config-name=ppo_trainer"]) is None
    (tmp_path / "mine.yaml").write_text("defaults:\n  - ppo_trainer\n  - _self_\n")
    assert gpu_only_config_problem(["-cp", str(tmp_path), "-cn", "mine"], cwd=tmp_path) is None
