"""Whole runs with algorithm.rollout_correction on (tiny random model, one worker, two steps): decoupled token TIS
with token rejection, and bypass mode with the REINFORCE loss. The metrics show each path really ran."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, fit_run, make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides

pytestmark = pytest.mark.e2e  # both runs take ~36 s together

RC = "algorithm.rollout_correction"


def _run(tmp_path: Path, *extra: str) -> list[dict]:
    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")
    return fit_run(tiny_run_overrides(model_dir, data_dir, tmp_path / "run", n_workers=1) + [
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        "actor_rollout_ref.rollout.calculate_log_probs=true", *extra])


def test_decoupled_token_tis_and_rejection_run(tmp_path: Path) -> None:
    steps = _run(tmp_path, f"{RC}.rollout_is=token", f"{RC}.rollout_rs=token")
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        assert math.isfinite(row["actor/pg_loss"])
        assert row["actor/grad_norm"] > 0
        # the engine and the actor hold the same weights: ratios ~1, nothing out of [0.5, 2]
        assert row["rollout_corr/rollout_is_mean"] == pytest.approx(1.0, abs=1e-2)
        assert row["rollout_corr/rollout_rs_masked_fraction"] == 0.0
        assert abs(row["rollout_corr/kl"]) < 1e-2 and row["rollout_corr/k3_kl"] >= 0
        assert "training/rollout_probs_diff_mean" in row  # the actor's log-prob pass ran


@pytest.mark.slow  # CI keeps a small e2e set; make test-all runs this
def test_bypass_mode_reinforce_run(tmp_path: Path) -> None:
    steps = _run(tmp_path, f"{RC}.bypass_mode=true", f"{RC}.loss_type=reinforce", f"{RC}.rollout_is=sequence")
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        assert math.isfinite(row["actor/pg_loss"]) and row["actor/grad_norm"] > 0
        # logged by the actor's loss, pi_theta against pi_rollout
        assert row["rollout_corr/rollout_is_seq_mean"] > 0
        assert "rollout_corr/kl" in row
        assert "training/rollout_probs_diff_mean" not in row  # no actor log-prob pass to compare with
