"""A whole tiny GRPO run through `python -m verl.trainer.main_ppo` with upstream's profiler keys: the actor's
worker writes a torch.profiler trace of training step 1, and of no other step."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.e2e import make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_main_ppo_writes_the_trace_of_the_profiled_step_only(tmp_path: Path) -> None:
    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")
    save_path = tmp_path / "profile"
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", n_workers=1)
    overrides += ["global_profiler.tool=torch", "global_profiler.steps=[1]", f"global_profiler.save_path={save_path}",
                  "actor_rollout_ref.actor.profiler.enable=true", f"hydra.run.dir={tmp_path / 'hydra'}"]
    proc = subprocess.run([sys.executable, "-m", "verl.trainer.main_ppo", *overrides], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    files = sorted(p.relative_to(save_path).as_posix() for p in save_path.rglob("*") if p.is_file())
    assert files == ["1/actor_rollout/prof_rank-0.json.gz"]  # step 2 ran unprofiled
    with gzip.open(save_path / files[0], "rt") as f:
        names = {e.get("name") for e in json.load(f)["traceEvents"]}
    # the rollout and the update (the old-log-prob pass is skipped on this on-policy setup: verl.trainer.ppo.
    # old_log_prob_reuse), with the operators they ran
    assert {"actor_rollout/generate_sequences", "actor_rollout/update_actor"} <= names
    assert any(n and n.startswith("aten::") for n in names)
