"""The hybrid engine through the whole stack: Ray, 2 FSDP ranks, one in-process vLLM engine per rank.

On a fixed set of sequences, the engines' own log-probs (vLLM scoring them, no sampling involved) must equal the
actor's recomputation while both hold the same weights; after training steps the actor has moved, the engines —
not yet synced — must disagree with it, and after the sharding manager's sync they must agree again. The engine
runs in fp32 so "agree" means float precision, not bf16 noise. Needs vLLM (skipped without it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("vllm")

from tests.helpers.e2e import (  # noqa: E402
    REPO,
    default_tokenizer_dir,
    make_arithmetic_data,
    tiny_run_overrides,
    train_step_rows,
)
from verl.protocol import DataProto  # noqa: E402

pytestmark = pytest.mark.e2e  # ~70 s on 2 busy cores

TOL = 1e-3


def _tiny_vllm_model_dir(out: Path) -> Path:
    """2-layer random Llama with the default tokenizer; head_dim 32, the smallest vLLM's CPU attention takes."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(default_tokenizer_dir())
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id, initializer_range=0.2,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _engine_log_probs(worker, data: DataProto) -> DataProto:
    """Runs on each rank: the engine scores the given responses with whatever weights it holds now."""
    return DataProto.from_dict({"engine_log_probs": worker.rollout.compute_log_prob(data)})


def _synced_engine_log_probs(worker, data: DataProto) -> DataProto:
    """Runs on each rank: the sharding manager's hand-over (the sync), then the engine scores."""
    with worker.rollout_sharding_manager:
        return DataProto.from_dict({"engine_log_probs": worker.rollout.compute_log_prob(data),
                                    "sync_s": torch.full((len(data),), worker.rollout_sharding_manager.last_sync_s)})


def _probe(trainer) -> DataProto:
    batch = DataProto.from_single_dict(next(iter(trainer.val_dataloader)))
    batch = batch.select(batch_keys=["input_ids", "attention_mask", "position_ids"])
    batch.meta_info.update({"eos_token_id": trainer.tokenizer.eos_token_id,
                            "pad_token_id": trainer.tokenizer.pad_token_id, "do_sample": True})
    return batch


def _max_gap(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return (a - b)[mask].abs().max().item()


def test_engines_follow_the_actor_only_through_the_sync(tmp_path: Path) -> None:
    import ray

    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import build_trainer

    model_dir = _tiny_vllm_model_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data")
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", adv_estimator="grpo") + [
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.dtype=float32",
        # the actor in fp32 as well: engine and actor are compared to 1e-3 (the default is the hardware's dtype)
        "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        "actor_rollout_ref.rollout.calculate_log_probs=true", "actor_rollout_ref.rollout.max_num_seqs=16",
    ]
    trainer, tracker, report_dir = build_trainer(validate_config(load_config(overrides)))
    wg = None
    try:
        trainer.init_workers()
        wg = trainer.actor_rollout_wg
        probe = _probe(trainer)
        fixed = wg.generate_sequences(probe)  # syncs; these sequences are the fixed probe from here on
        mask = fixed.batch["response_mask"].bool()
        actor_before = wg.compute_log_prob(fixed).batch["old_log_probs"]
        engine_before = wg.execute_with_func_generator(_engine_log_probs, fixed).batch["engine_log_probs"]
        sampled_gap = _max_gap(fixed.batch["rollout_log_probs"], actor_before, mask)
        scored_gap = _max_gap(engine_before, actor_before, mask)
        assert sampled_gap < TOL and scored_gap < TOL, (sampled_gap, scored_gap)

        trainer.fit()  # 2 GRPO steps; the last thing each rank does is update_actor

        actor_after = wg.compute_log_prob(fixed).batch["old_log_probs"]
        moved = _max_gap(actor_after, actor_before, mask)
        assert moved > 10 * TOL, f"the actor did not move: max log-prob change {moved}"
        stale = wg.execute_with_func_generator(_engine_log_probs, fixed).batch["engine_log_probs"]
        stale_gap = _max_gap(stale, actor_after, mask)
        assert stale_gap > 10 * TOL, f"before the sync the engines already match the updated actor ({stale_gap})"
        synced_out = wg.execute_with_func_generator(_synced_engine_log_probs, fixed)
        synced_gap = _max_gap(synced_out.batch["engine_log_probs"], actor_after, mask)
        assert synced_gap < TOL, f"after the sync the engines still differ from the actor: {synced_gap}"
        sync_s = synced_out.batch["sync_s"].max().item()

        # and the next rollout samples from the updated policy: its own log-probs are the actor's
        after = wg.generate_sequences(probe)
        after_gap = _max_gap(after.batch["rollout_log_probs"], wg.compute_log_prob(after).batch["old_log_probs"],
                             after.batch["response_mask"].bool())
        assert after_gap < TOL, after_gap
    finally:
        tracker.finish()
        ray.shutdown()

    steps = train_step_rows(report_dir)
    assert [r["step"] for r in steps] == [1, 2]
    print(f"gaps: sampled {sampled_gap:.2e} scored {scored_gap:.2e} stale {stale_gap:.3f} synced {synced_gap:.2e}; "
          f"actor moved {moved:.3f}; sync {sync_s:.3f}s")
