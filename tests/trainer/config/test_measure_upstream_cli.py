"""scripts/measure_upstream_cli.py (docs/migration.md "Measured"): a line is stale when upstream's own config or code
refuses it too, including values upstream's code stops on (a reward manager its registry lacks, a tool config
without the `tools:` list), and the figure counts only the lines upstream would run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
RUN = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo trainer.n_gpus_per_node=2 " \
      "data.train_files=$HOME/d.parquet data.val_files=$HOME/d.parquet"


def test_values_upstream_refuses_make_a_line_stale(tmp_path):
    scripts = tmp_path / "examples"
    scripts.mkdir()
    (scripts / "servers.json").write_text('{"mcpServers": {"m": {"command": "python3"}}}')
    (scripts / "a.sh").write_text(f"{RUN} reward_model.reward_manager=generative\n")
    (scripts / "b.sh").write_text(f"{RUN} actor_rollout_ref.rollout.multi_turn.enable=true "
                                  "actor_rollout_ref.rollout.multi_turn.tool_config_path=$PWD/examples/servers.json\n")
    (scripts / "c.sh").write_text(f"{RUN} reward_model.reward_manager=dapo\n")
    upstream = ROOT / "verl" / "trainer" / "config" / "_generated_ppo_trainer.yaml"  # every key these lines set
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "measure_upstream_cli.py"), str(tmp_path),
                          "--upstream-config", str(upstream)], capture_output=True, text=True, check=True,
                         timeout=300, cwd=ROOT).stdout
    assert "stale (upstream's _generated_ppo_trainer.yaml refuses a key the line sets): 2 lines" in out
    assert "reward_model.reward_manager=generative (upstream's reward-manager registry has no 'generative')" in out
    assert "tool_config_path=servers.json (upstream's tool loader reads a `tools:` list it lacks)" in out
    assert "over the 1 lines that upstream's config runs: (accepted + gpu_only) = 1/1 = 100.0%" in out
