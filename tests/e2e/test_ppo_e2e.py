"""Whole runs through Ray with 2 FSDP ranks on a tiny random model: GRPO and PPO (critic + GAE).

Checks what a broken pipeline would get wrong silently: losses finite, the weights really change, and the
rollout after an update samples from the updated weights (its own log-probs match the actor's recomputation).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.helpers.e2e import REPO, make_arithmetic_data, make_tiny_model_dir, tiny_run_overrides, train_step_rows
from verl.protocol import DataProto

pytestmark = pytest.mark.e2e


def _probe(trainer) -> DataProto:
    batch_dict = next(iter(trainer.val_dataloader))
    batch = DataProto.from_single_dict(batch_dict).select(batch_keys=["input_ids", "attention_mask", "position_ids"])
    batch.meta_info.update({"eos_token_id": trainer.tokenizer.eos_token_id,
                            "pad_token_id": trainer.tokenizer.pad_token_id, "do_sample": True})
    return batch


def _rollout_and_actor_log_probs(trainer, probe: DataProto) -> tuple[DataProto, torch.Tensor]:
    torch.manual_seed(0)
    out = trainer.actor_rollout_wg.generate_sequences(probe)
    actor = trainer.actor_rollout_wg.compute_log_prob(out).batch["old_log_probs"]
    return out, actor


# CI keeps gae (critic and actor both follow); grpo whole runs are covered by test_batch_keys and others
@pytest.mark.parametrize("adv_estimator", [pytest.param("grpo", marks=pytest.mark.slow), "gae"])
def test_two_rank_run_updates_weights_and_rollout_follows(tmp_path: Path, adv_estimator: str) -> None:
    import ray

    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import build_trainer

    model_dir = make_tiny_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", adv_estimator=adv_estimator) + [
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
    ]
    trainer, tracker, report_dir = build_trainer(validate_config(load_config(overrides)))
    try:
        trainer.init_workers()
        probe = _probe(trainer)
        before, actor_before = _rollout_and_actor_log_probs(trainer, probe)
        mask = before.batch["response_mask"].bool()
        # the rollout's own log-probs agree with the actor's recomputation: same weights, same temperature
        assert torch.allclose(before.batch["rollout_log_probs"][mask], actor_before[mask], atol=1e-3)

        trainer.fit()

        actor_same_seqs = trainer.actor_rollout_wg.compute_log_prob(before).batch["old_log_probs"]
        change = (actor_same_seqs - actor_before)[mask].abs().max().item()
        assert change > 1e-3, f"weights did not change: max log-prob change {change}"
        after, actor_after = _rollout_and_actor_log_probs(trainer, probe)
        mask_after = after.batch["response_mask"].bool()
        assert torch.allclose(after.batch["rollout_log_probs"][mask_after], actor_after[mask_after], atol=1e-3), \
            "the rollout after the update does not sample from the updated weights"
    finally:
        tracker.finish()
        ray.shutdown()

    steps = train_step_rows(report_dir)
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        assert math.isfinite(row["actor/pg_loss"]) and math.isfinite(row["actor/grad_norm"])
        assert row["actor/grad_norm"] > 0
        # the trainer compares the rollout's log-probs with the actor's: same weights, so the probabilities agree
        assert row["training/rollout_probs_diff_max"] < 1e-3
        assert row["training/rollout_actor_probs_pearson_corr"] > 0.999
        if adv_estimator == "gae":
            assert math.isfinite(row["critic/vf_loss"]) and "critic/values/mean" in row
