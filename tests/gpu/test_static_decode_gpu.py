"""The HF rollout with ``rollout.enforce_eager=false`` on a GPU: a static KV cache and transformers' compiled
decode step (CUDA graphs) on a replica of the FSDP2 actor. The rollout's log-probs of what it sampled must agree
with the actor's recomputed ones (what PPO's ratio needs), before and after an update, and the compiled path must
really run (no silent fall-back to eager decoding).

Marked ``gpu``: skipped with the reason where CUDA is absent (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.ranks import actor_worker, join_one_rank, leave
from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import PAD_ID, left_padded_prompts, save_tiny_model_dir
from tests.workers.test_lora_workers import ARR, _batch, _train_batch
from verl.protocol import DataProto

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny_static_decode_model"))


def _prompts(rows: int) -> DataProto:
    ids, mask, pos = left_padded_prompts([6, 3, 5, 1, 4, 2, 6, 5][:rows], 6, seed=4)
    return DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": pos},
                               meta_info={"eos_token_id": [127], "pad_token_id": PAD_ID, "do_sample": True})


def _gap(worker, out: DataProto) -> float:
    """Mean |rollout log-prob - actor log-prob| over the sampled response tokens."""
    data = DataProto.from_dict({k: out.batch[k] for k in ("input_ids", "attention_mask", "position_ids",
                                                          "responses", "response_mask")},
                               meta_info={"temperature": 1.0})
    actor = worker.compute_log_prob(data).batch["old_log_probs"].float().cpu()
    mask = out.batch["response_mask"].bool().cpu()
    return float((out.batch["rollout_log_probs"].float().cpu() - actor)[mask].abs().mean())


def _scenario(rank: int, port: int, model_dir: str, results) -> None:
    join_one_rank(port)
    try:
        worker = actor_worker(model_dir, f"{ARR}.rollout.enforce_eager=false",
                              f"{ARR}.rollout.calculate_log_probs=true", "data.max_response_length=16")
        rollout = worker.rollout
        out = {"chosen": rollout.static_cache}
        torch.manual_seed(0)
        first = worker.generate_sequences(_prompts(8))  # compiles and captures
        second = worker.generate_sequences(_prompts(3))  # padded to the captured 8 rows
        out["gaps"] = [_gap(worker, first), _gap(worker, second)]
        out["rows"] = (len(first), len(second), rollout._decoder.rows if rollout._decoder else None)
        out["compiled"] = rollout._decoder is not None and rollout._decoder.compiled
        worker.update_actor(_train_batch(worker, _batch()))
        out["gaps"].append(_gap(worker, worker.generate_sequences(_prompts(8))))
        out["off"] = rollout.static_cache_off
        results[rank] = out
    finally:
        leave()


def test_static_cache_decode_agrees_with_the_actor(model_dir):
    out = run_ranks(_scenario, free_port(), model_dir, nprocs=1, timeout_s=280)[0]
    assert out["chosen"] is True
    assert out["off"] is None, out["off"]  # compiled and captured, not fallen back to eager decoding
    assert out["compiled"]  # transformers compiled the decode step (not a static cache run eagerly)
    assert out["rows"] == (8, 3, 8)
    assert all(gap < 0.02 for gap in out["gaps"]), out["gaps"]  # bf16 compute on both sides
