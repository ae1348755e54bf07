"""One real training step per algorithm, on a tiny random model: the batch that reaches the actor update holds
exactly the keys verl.protocol.keys lists for that config, with the listed dtypes and shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.e2e import REPO, make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides
from verl.protocol import DataProto
from verl.protocol.keys import check_batch, expected_keys

pytestmark = pytest.mark.e2e

# Each run also switches on an optional producer, so more of the table is checked against real code:
# GRPO with the KL loss (ref_log_prob) and the rollout's own log-probs; GAE with KL in the reward.
# One rank is enough for the keys and keeps each run under a minute, so they run in `make test`.
RUNS = {
    "grpo": ["actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.rollout.calculate_log_probs=true"],
    "gae": ["algorithm.use_kl_in_reward=true"],
}


@pytest.mark.parametrize("adv_estimator", sorted(RUNS))
def test_batch_at_actor_update_matches_key_table(tmp_path: Path, adv_estimator: str) -> None:
    import ray

    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import build_trainer

    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data", train_size=8, test_size=4)
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", adv_estimator=adv_estimator,
                                   n_workers=1) + [
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        "trainer.total_training_steps=1", "trainer.save_freq=-1",
    ] + RUNS[adv_estimator]
    typed = validate_config(load_config(overrides))
    trainer, tracker, _ = build_trainer(typed)
    captured: list[DataProto] = []
    try:
        trainer.init_workers()
        update_actor = trainer.actor_rollout_wg.update_actor

        def capture(batch: DataProto, *args, **kwargs):
            captured.append(batch)
            return update_actor(batch, *args, **kwargs)

        trainer.actor_rollout_wg.update_actor = capture
        trainer.fit()
    finally:
        tracker.finish()
        ray.shutdown()

    assert len(captured) == 1, f"expected one actor update in one step, saw {len(captured)}"
    batch = captured[0]
    assert check_batch(batch, typed) == []
    present = set(batch.batch.keys()) | set(batch.non_tensor_batch)
    # the arithmetic parquet carries every optional column of verl's data format, and the built-in reward manager
    # scores under reward_model.scoring.timeout's default limit, so every row says whether it timed out
    assert present == expected_keys(typed) | {"data_source", "ability", "reward_model", "extra_info", "reward_timeout"}
    assert not any(batch.non_tensor_batch["reward_timeout"])
    extra = {"values"} if adv_estimator == "gae" else {"rollout_log_probs"}
    assert {"ref_log_prob"} | extra <= present
    # 4 prompts x rollout.n=2 rows, max_response_length=8 response columns, as configured
    assert batch.batch["responses"].shape == (8, 8)
