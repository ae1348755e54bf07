"""MoE router replay on one CUDA device (tiny Qwen3-MoE, fp32, one process): the recorded experts are forced after
the router changed, the R2 update's ratio is exactly 1 (padded and packed), and the hf rollout's R3 record is what
the actor replays. The same checks as tests/models/test_router_replay.py and
tests/workers/actor/test_router_replay_actor.py, with the model and the records on the GPU.

Marked ``gpu``: skipped with the reason where CUDA is absent (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_moe import ExpertsSpy, perturb_unused_experts, tiny_qwen3_moe
from tests.workers.actor.test_router_replay_actor import _actor, _batch
from tests.workers.rollout.test_hf_rollout import prompts, rollout_config
from verl.models.router_replay import ROUTED_EXPERTS_KEY, RouterReplay
from verl.workers.rollout import HFRollout

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


def _cuda_moe():
    return tiny_qwen3_moe().cuda()


def test_replay_forces_the_recorded_experts_on_cuda():
    model = _cuda_moe()
    replay = RouterReplay.of(model)
    ids = torch.randint(3, 128, (2, 7), device="cuda")
    with torch.no_grad(), replay.record():
        before = model(input_ids=ids).logits
    record = replay.take_record()
    assert record.is_cuda and perturb_unused_experts(model, record.cpu()) > 0
    spy = ExpertsSpy(model)
    with torch.no_grad():
        model(input_ids=ids)
        native = spy.stacked()
        replay.set_replay(record)
        after = model(input_ids=ids).logits
        replayed = spy.stacked()
        replay.clear()
    assert not torch.equal(native.long(), record.long()) and torch.equal(replayed.long(), record.long())
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rmpad", [False, True])
def test_r2_update_replays_on_cuda(rmpad):
    model = _cuda_moe()
    data = _batch()
    recorder = _actor(model, "R2", rmpad)
    old, _ = recorder.compute_log_prob(data)
    routed = recorder.last_routed_experts
    assert not routed.is_cuda and routed.shape[:2] == data.batch["input_ids"].shape
    data.batch["old_log_probs"] = old
    data.batch["advantages"] = torch.randn(old.shape, generator=torch.Generator().manual_seed(3))
    data.batch[ROUTED_EXPERTS_KEY] = routed
    assert perturb_unused_experts(model, routed) > 0
    metrics = _actor(model, "R2", rmpad, optimizer=True).update_policy(data)
    assert metrics["actor/ppo_kl"][0] == pytest.approx(0.0, abs=1e-6)


def test_r3_hf_rollout_record_is_replayed_on_cuda():
    model = _cuda_moe()
    out = HFRollout(model, rollout_config(enable_rollout_routing_replay=True)).generate_sequences(
        prompts(do_sample=False))
    out.meta_info.update({"temperature": 1.0, "micro_batch_size": 2})
    expected, _ = _actor(model, "disabled", rmpad=True).compute_log_prob(out)
    perturb_unused_experts(model, out.batch[ROUTED_EXPERTS_KEY])
    replayed, _ = _actor(model, "R3", rmpad=True).compute_log_prob(out)
    mask = out.batch["response_mask"].bool()
    torch.testing.assert_close(replayed[mask], expected[mask], rtol=1e-4, atol=1e-4)
