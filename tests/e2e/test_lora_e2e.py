"""A whole GRPO run with LoRA through Ray: 2 FSDP ranks, one in-process vLLM engine per rank, use_kl_loss.

Checks what LoRA changes in a run: no reference worker is built (the actor with its adapter disabled is the
reference), the KL to it grows from 0 as the adapter trains, the vLLM engines receive the merged weights (their
log-probs equal the actor's after an update), and the checkpoint holds the peft adapter. The engine runs in fp32,
so "equal" means float precision. Needs vLLM (skipped without it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm")

from tests.e2e.test_vllm_sync import (  # noqa: E402
    TOL,
    _engine_log_probs,
    _max_gap,
    _probe,
    _synced_engine_log_probs,
    _tiny_vllm_model_dir,
)
from tests.helpers.e2e import REPO, make_arithmetic_data, tiny_run_overrides, train_step_rows  # noqa: E402

pytestmark = pytest.mark.e2e


def test_lora_run_syncs_merged_weights_and_uses_the_base_model_as_reference(tmp_path: Path) -> None:
    import ray

    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import build_trainer

    model_dir = _tiny_vllm_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")
    run_dir = tmp_path / "run"
    overrides = tiny_run_overrides(model_dir, data_dir, run_dir, adv_estimator="grpo") + [
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.dtype=float32",
        # the actor in fp32 as well: engine and actor are compared to 1e-3 (the default is the hardware's dtype)
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.rollout.max_num_seqs=16",
        "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.actor.use_kl_loss=true", "actor_rollout_ref.actor.kl_loss_coef=0.01",
        "actor_rollout_ref.model.use_remove_padding=true", "trainer.save_freq=2",
    ]
    trainer, tracker, report_dir = build_trainer(validate_config(load_config(overrides)))
    try:
        trainer.init_workers()
        wg = trainer.actor_rollout_wg
        assert trainer.ref_policy_wg is wg  # the reference is the actor's own module: no second worker group
        probe = _probe(trainer)
        fixed = wg.generate_sequences(probe)
        mask = fixed.batch["response_mask"].bool()
        actor_before = wg.compute_log_prob(fixed).batch["old_log_probs"]
        ref_before = wg.compute_ref_log_prob(fixed).batch["ref_log_prob"]
        assert _max_gap(actor_before, ref_before, mask) < 1e-5  # a fresh adapter (B = 0) is the base model

        trainer.fit()

        actor_after = wg.compute_log_prob(fixed).batch["old_log_probs"]
        moved = _max_gap(actor_after, actor_before, mask)
        assert moved > 10 * TOL, f"the adapter did not move the actor: {moved}"
        ref_after = wg.compute_ref_log_prob(fixed).batch["ref_log_prob"]
        assert _max_gap(ref_after, ref_before, mask) < 1e-5, "the reference (adapter disabled) changed"
        stale = wg.execute_with_func_generator(_engine_log_probs, fixed).batch["engine_log_probs"]
        assert _max_gap(stale, actor_after, mask) > 10 * TOL
        synced = wg.execute_with_func_generator(_synced_engine_log_probs, fixed).batch["engine_log_probs"]
        synced_gap = _max_gap(synced, actor_after, mask)
        assert synced_gap < TOL, f"after the sync the engines differ from the LoRA actor: {synced_gap}"
    finally:
        tracker.finish()
        ray.shutdown()

    steps = train_step_rows(report_dir)
    assert [r["step"] for r in steps] == [1, 2]
    assert steps[-1]["actor/kl_loss"] > 0  # the second step's policy differs from the base model
    assert all(r["training/rollout_probs_diff_max"] < TOL for r in steps)  # vLLM samples the merged weights
    adapter = run_dir / "global_step_2" / "actor" / "lora_adapter"
    assert (adapter / "adapter_config.json").is_file() and (adapter / "adapter_model.safetensors").is_file()
