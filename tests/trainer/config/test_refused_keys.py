"""The keys issue 17 found silently ignored now stop `python -m verl.trainer.main_ppo` with exit code 2,
naming each key, before Ray starts. One subprocess carries them all: every problem is reported at once."""

from __future__ import annotations

import subprocess
import sys

# (override, the dotted key the message must name)
FORMERLY_SILENT = [
    ("reward_model.ulysses_sequence_parallel_size=2", "reward_model.ulysses_sequence_parallel_size"),
    ("actor_rollout_ref.rollout.multi_turn.use_inference_chat_template=true",
     "actor_rollout_ref.rollout.multi_turn.use_inference_chat_template"),
    ("actor_rollout_ref.rollout.agent.custom_async_server.path=my.server",
     "actor_rollout_ref.rollout.agent.custom_async_server.path"),
    ("actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.name"),
    ("trainer.logger=[console,clearml,vemlp_wandb]", "trainer.logger"),
]


def test_formerly_silent_keys_exit_2_naming_each_key(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_ppo", f"hydra.run.dir={tmp_path / 'hydra'}",
         *(override for override, _ in FORMERLY_SILENT)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    refusals = [line for line in proc.stderr.splitlines() if " is refused: " in line or " refused: " in line]
    for _, key in FORMERLY_SILENT:
        assert any(key in line for line in refusals), f"{key} not named in:\n{proc.stderr}"
    for logger in ("clearml", "vemlp_wandb"):
        assert f"trainer.logger='{logger}' is refused" in proc.stderr
    assert "Traceback" not in proc.stderr
