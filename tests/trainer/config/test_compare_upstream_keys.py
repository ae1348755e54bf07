"""scripts/compare_upstream_keys.py counts which leaves of an upstream flat config exist here (docs/migration.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run(upstream: Path, *show: str) -> list[str]:
    args = [a for s in show for a in ("--show", s)]
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "compare_upstream_keys.py"), str(upstream), *args],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    return out.splitlines()


def test_present_missing_and_another_default_are_counted(tmp_path):
    upstream = tmp_path / "upstream.yaml"
    # one leaf as ours, one with another default, one we lack, and a leaf that is a section here (engine_kwargs)
    upstream.write_text("algorithm:\n  gamma: 1.0\n  lam: 0.5\n  not_here: 3\n"
                        "actor_rollout_ref:\n  rollout:\n    engine_kwargs: null\n")
    lines = run(upstream, "missing", "defaults")
    assert lines[1] == "upstream's leaves present here: 3 of 4 (missing 1)"
    assert "missing\talgorithm.not_here\t3" in lines
    assert "default\talgorithm.lam\tupstream 0.5\there 1.0" in lines
    assert not any("gamma" in line for line in lines[3:])  # the same default
