"""benchmarks/vs_trl.py without training: it skips cleanly where trl is missing, and our side's command line
carries none of the performance keys the benchmark is meant to leave to the defaults."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "vs_trl.py"


@pytest.fixture(scope="module")
def vs_trl():
    spec = importlib.util.spec_from_file_location("bench_vs_trl", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_skip_message_names_the_install_command(vs_trl, monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "trl", None)  # makes `import trl` raise ImportError
    assert vs_trl.main(["--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "skipped: trl is not importable" in out
    assert f"-m pip install {vs_trl.TRL_PIN}" in out
    assert not (tmp_path / "out").exists()  # nothing was prepared or run


def test_script_exits_zero_when_trl_cannot_be_imported(tmp_path):
    # a `trl` package first on the path that fails to import hides any installed trl from the script
    shadow = tmp_path / "shadow" / "trl"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    path = os.pathsep.join(p for p in (str(shadow.parent), os.environ.get("PYTHONPATH", "")) if p)
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr
    assert "vs_trl: skipped: trl is not importable (hidden by the test)" in done.stdout
    assert not (tmp_path / "out").exists()


def test_our_command_sets_no_performance_key(vs_trl, tmp_path):
    keys = [o.split("=", 1)[0] for o in vs_trl.ours_overrides(tmp_path, "/models/m", tmp_path / "run", 5)]
    words = ("dtype", "precision", "padding", "checkpointing", "dynamic_bsz", "max_token_len")
    assert [k for k in keys if any(w in k for w in words)] == []
    assert "actor_rollout_ref.rollout.name" in keys and "actor_rollout_ref.actor.use_kl_loss" in keys


def test_trl_candidates_share_the_job(vs_trl, tmp_path):
    for name in vs_trl.CANDIDATES:
        kw = vs_trl.trl_config_kwargs(name, 5, tmp_path)
        # one optimizer step = 8 prompts x 4 completions, whatever the micro-batch
        assert kw["per_device_train_batch_size"] * kw["gradient_accumulation_steps"] == 32
        assert (kw["num_generations"], kw["max_completion_length"], kw["beta"], kw["learning_rate"]) == (4, 48, 0.0, 1e-5)
        assert kw["bf16"] == name.startswith("bf16") and kw["gradient_checkpointing"] == ("_gc" in name)
    with pytest.raises(SystemExit, match="unknown candidate 'fp8'"):
        vs_trl.trl_config_kwargs("fp8", 5, tmp_path)


def test_median_drops_the_warmup_steps(vs_trl):
    assert vs_trl.median_after_warmup([60.0, 10.0, 30.0, 20.0], warmup=1) == 20.0
    with pytest.raises(RuntimeError, match="raise --steps"):
        vs_trl.median_after_warmup([60.0], warmup=1)
