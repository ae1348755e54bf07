"""Whole PPO runs (GAE: actor, ref via kl loss, critic) on 2 workers with ulysses_sequence_parallel_size=2 for the
actor and the critic, against the same run with sp=1. The rollout is per rank in both, so both runs train on the
same rows; every response fills max_response_length, so one SP group of 8 rows and two dp ranks of 4 give the same
token-mean gradient: the first step's values, grad norms, kl and entropy agree."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, fit_run, make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides

pytestmark = [pytest.mark.e2e, pytest.mark.slow]  # ~40 s for both runs; unit equivalence: tests/workers/test_ulysses*.py


def _run(tmp_path: Path, sp: int) -> list[dict]:
    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")
    return fit_run(tiny_run_overrides(model_dir, data_dir, tmp_path / f"run_sp{sp}", adv_estimator="gae") + [
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        "actor_rollout_ref.actor.use_kl_loss=true",
        f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp}", f"critic.ulysses_sequence_parallel_size={sp}"])


def test_sp2_run_matches_sp1_run(tmp_path: Path) -> None:
    sp1, sp2 = _run(tmp_path, 1), _run(tmp_path, 2)
    assert [r["step"] for r in sp2] == [1, 2]
    for row in sp2:
        assert math.isfinite(row["actor/pg_loss"]) and row["actor/grad_norm"] > 0 and row["critic/grad_norm"] > 0
    first1, first2 = sp1[0], sp2[0]
    assert first2["response_length/mean"] == first1["response_length/mean"] == 8.0
    # the gradients (their norms), values, kl and entropy; not pg_loss / vf_loss, which are logged per rank's
    # mini-batch (4 rows each at sp=1, all 8 at sp=2): with whitened advantages sp=2's pg_loss is ~0 at ratio 1
    keys = ("critic/values/mean", "critic/grad_norm", "actor/grad_norm", "actor/kl_loss", "actor/entropy")
    differ = {k: (first2[k], first1[k]) for k in keys if first2[k] != pytest.approx(first1[k], rel=1e-3, abs=1e-6)}
    assert not differ, differ
