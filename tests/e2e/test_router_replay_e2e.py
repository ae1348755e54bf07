"""Router replay through a whole training step (Ray, the FSDP worker, the trainer's batch plumbing) on a tiny random
Qwen3-MoE: R2 (the old-log-prob pass records) and R3 (the hf rollout records, rollout.mode=sync or async: the agent
loop). The batch that reaches the actor update carries routed_experts as verl.protocol.keys lists it, and the step
trains."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.helpers.e2e import REPO, default_tokenizer_dir, make_arithmetic_data, tiny_run_overrides
from verl.protocol import DataProto
from verl.protocol.keys import check_batch

pytestmark = pytest.mark.e2e

ARR = "actor_rollout_ref"
RUNS = {
    "R2": [f"{ARR}.actor.router_replay.mode=R2"],
    "R3": [f"{ARR}.actor.router_replay.mode=R3", f"{ARR}.rollout.enable_rollout_routing_replay=true",
           f"{ARR}.rollout.mode=sync"],
    # the agent loop (rollout.mode=async, the default): the HF engine's per-request records, assembled by the loop
    "R3-async": [f"{ARR}.actor.router_replay.mode=R3", f"{ARR}.rollout.enable_rollout_routing_replay=true",
                 f"{ARR}.rollout.mode=async"],
}


def _tiny_moe_dir(out: Path) -> Path:
    from transformers import AutoTokenizer

    from tests.helpers.tiny_moe import tiny_qwen3_moe

    tokenizer = AutoTokenizer.from_pretrained(default_tokenizer_dir())
    model = tiny_qwen3_moe(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                           eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
                           max_position_embeddings=1024)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


# R2 on one rank runs in the default suite (about 1.5 min on 2 cores); the others with `make test-all`. Two ranks:
# FSDP2 shards the MoE layers, and the hf rollout steps every rank in lockstep (synced_gpus) until all are done
@pytest.mark.parametrize("mode, ranks", [("R2", 1), pytest.param("R3", 1, marks=pytest.mark.slow),
                                         pytest.param("R3", 2, marks=pytest.mark.slow),
                                         pytest.param("R3-async", 1, marks=pytest.mark.slow),
                                         pytest.param("R3-async", 2, marks=pytest.mark.slow)])
def test_routed_experts_reach_the_update(tmp_path: Path, mode: str, ranks: int) -> None:
    import ray

    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import build_trainer

    model_dir = _tiny_moe_dir(tmp_path / "model")
    data_dir = make_arithmetic_data(tmp_path / "data", train_size=8, test_size=4)
    overrides = tiny_run_overrides(model_dir, data_dir, tmp_path / "run", n_workers=ranks) + [
        f"custom_reward_function.path={REPO / 'tests/e2e/hash_reward.py'}",
        "trainer.total_training_steps=1", "trainer.save_freq=-1",
        # two mini-batches: the second is updated after the first step moved the router, so replay matters
        f"{ARR}.actor.ppo_mini_batch_size=2",
    ] + RUNS[mode]
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

    assert len(captured) == 1
    batch = captured[0]
    assert check_batch(batch, typed) == []
    routed = batch.batch["routed_experts"]
    mask = batch.batch["attention_mask"].bool()
    assert routed.shape == (*mask.shape, 2, 2) and routed.dtype == torch.int16
    assert (routed[mask] >= 0).float().mean() > 0.9  # every real token (R3: all but each row's last) was recorded
    assert ((routed >= -1) & (routed < 32)).all()
