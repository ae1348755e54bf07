"""verl.models.router_replay on a tiny Qwen3-MoE: record, replay (the experts forced, the weights recomputed from the
current router logits over them), token layouts (padded / packed), generation records, and the model checks."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_model import left_padded_prompts, tiny_llama
from tests.helpers.tiny_moe import TOP_K, ExpertsSpy, perturb_unused_experts, routers, tiny_qwen3_moe
from verl.models.router_replay import (
    NOT_ROUTED,
    RouterReplay,
    flat_targets,
    generation_record,
    moe_config_problem,
    unflatten_record,
)


def _ids(rows=2, length=7, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, 128, (rows, length), generator=gen)


def _log_probs(model, ids):
    logits = model(input_ids=ids, use_cache=False).logits[:, :-1]
    return torch.log_softmax(logits.float(), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def test_record_has_one_row_per_token_per_layer_and_matches_what_the_experts_used():
    model = tiny_qwen3_moe()
    spy = ExpertsSpy(model)
    replay = RouterReplay.of(model)
    assert RouterReplay.of(model) is replay  # one instance, hooks installed once
    ids = _ids()
    with torch.no_grad(), replay.record():
        model(input_ids=ids)
    record = replay.take_record()
    assert record.shape == (ids.numel(), 2, TOP_K) and record.dtype == torch.int16
    assert torch.equal(record.long(), spy.stacked().long())
    assert replay.mode is None  # back to the model's own routing


def test_replay_forces_the_recorded_experts_after_the_router_changed():
    model = tiny_qwen3_moe()
    replay = RouterReplay.of(model)
    ids = _ids()
    with torch.no_grad(), replay.record():
        recorded_log_probs = _log_probs(model, ids)
    record = replay.take_record()
    assert perturb_unused_experts(model, record) > 0
    spy = ExpertsSpy(model)
    with torch.no_grad():
        native_log_probs = _log_probs(model, ids)
        native = spy.stacked()
        replay.set_replay(record)
        replayed_log_probs = _log_probs(model, ids)
        replayed = spy.stacked()
        replay.clear()
        after_clear = _log_probs(model, ids)
    # without replay the changed router picks other experts and the log-probs move
    assert not torch.equal(native.long(), record.long())
    assert (native_log_probs - recorded_log_probs).abs().max() > 1e-3
    # with replay the experts are the recorded ones, and since their logits did not change, neither do the
    # renormalised weights: the log-probs are the recorded forward's
    assert torch.equal(replayed.long(), record.long())
    torch.testing.assert_close(replayed_log_probs, recorded_log_probs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(after_clear, native_log_probs)


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_replayed_weights_are_the_current_softmax_at_the_replayed_experts(norm_topk_prob):
    """Hand-computed: router logits [2, 1, 0, -1] (one token), replayed experts (3, 2)."""
    model = tiny_qwen3_moe(num_experts=4, norm_topk_prob=norm_topk_prob)
    gate = routers(model)[0]
    replay = RouterReplay.of(model)
    with torch.no_grad():
        gate.weight.zero_()
        gate.weight[:, 0] = torch.tensor([2.0, 1.0, 0.0, -1.0])
    hidden = torch.zeros(1, 32)
    hidden[0, 0] = 1.0
    replay.set_replay(torch.tensor([[[3, 2], [0, 1]]]))
    with torch.no_grad():
        logits, weights, chosen = gate(hidden)
    replay.clear()
    assert chosen.tolist() == [[3, 2]]
    exp = torch.tensor([2.0, 1.0, 0.0, -1.0]).exp()
    probs = exp / exp.sum()
    expected = torch.stack([probs[3], probs[2]])
    if norm_topk_prob:
        expected = expected / expected.sum()
    torch.testing.assert_close(weights[0], expected)
    with torch.no_grad():
        _, native_weights, native = gate(hidden)  # cleared: the router's own top-2 again
    assert native.tolist() == [[0, 1]]


def test_replay_keeps_a_tokens_own_routing_where_nothing_was_recorded():
    model = tiny_qwen3_moe()
    replay = RouterReplay.of(model)
    ids = _ids(rows=1, length=5)
    with torch.no_grad(), replay.record():
        model(input_ids=ids)
    record = replay.take_record()
    target = record.clone()
    target[2] = NOT_ROUTED
    target[0] = torch.tensor([[5, 6], [7, 8]])
    spy = ExpertsSpy(model)
    replay.set_replay(target)
    with torch.no_grad():
        model(input_ids=ids)
    replay.clear()
    used = spy.stacked()
    assert used[0].tolist() == [[5, 6], [7, 8]]
    assert torch.equal(used[2].long(), record[2].long())  # NOT_ROUTED: the router chose, as recorded


def test_gradient_checkpointing_recompute_routes_as_the_replayed_forward():
    model = tiny_qwen3_moe()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    replay = RouterReplay.of(model)
    ids = _ids()
    with torch.no_grad(), replay.record():
        model(input_ids=ids)
    record = replay.take_record()
    perturb_unused_experts(model, record)
    spy = ExpertsSpy(model)
    replay.set_replay(record)
    _log_probs(model, ids).sum().backward()
    replay.clear()
    assert all(len(calls) == 2 for calls in spy.calls)  # the forward and its recompute in backward
    assert torch.equal(spy.stacked(0).long(), record.long()) and torch.equal(spy.stacked(1).long(), record.long())
    assert routers(model)[0].weight.grad is not None  # gradients still reach the router


def test_replay_refuses_a_record_that_does_not_align():
    model = tiny_qwen3_moe()
    replay = RouterReplay.of(model)
    with pytest.raises(ValueError, match="MoE layers with top_k=2"):
        replay.set_replay(torch.zeros(14, 3, 2, dtype=torch.long))
    replay.set_replay(torch.zeros(5, 2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="routes 14 tokens but routed_experts holds 5"), torch.no_grad():
        model(input_ids=_ids())
    replay.clear()


def test_padded_and_packed_layouts_round_trip():
    _, mask, _ = left_padded_prompts([3, 5], prompt_len=5)
    mask = torch.cat([mask, torch.tensor([[1, 0], [1, 1]])], dim=1)  # right-padded response
    routed = torch.arange(2 * 7 * 2 * 2).reshape(2, 7, 2, 2)
    packed = flat_targets(routed, mask, packed=True)
    assert packed.shape == (int(mask.sum()), 2, 2)
    assert torch.equal(packed[0], routed[0, 2])  # row 0's first real token (after 2 pads)
    back = unflatten_record(packed, mask, packed=True)
    assert torch.equal(back[mask.bool()], routed[mask.bool()]) and (back[~mask.bool()] == NOT_ROUTED).all()
    padded = flat_targets(routed, mask, packed=False)
    assert padded.shape == (14, 2, 2) and torch.equal(unflatten_record(padded, mask, packed=False), routed)


def test_generation_record_aligns_prefill_and_decode_steps_with_positions():
    # 2 rows, prompt width 3, then 2 decode steps; one layer, k=1; a finished peer's extra call is dropped
    prefill = torch.tensor([[10], [11], [12], [20], [21], [22]])
    steps = [torch.tensor([[13], [23]]), torch.tensor([[14], [24]]), torch.tensor([[99], [99]])]
    record = generation_record([[prefill, *steps]], rows=2, fed_positions=5, width=6)
    assert record.shape == (2, 6, 1, 1)
    assert record[..., 0, 0].tolist() == [[10, 11, 12, 13, 14, -1], [20, 21, 22, 23, 24, -1]]


def test_a_dense_model_is_refused_naming_why():
    with pytest.raises(ValueError, match="not a mixture of experts"):
        RouterReplay(tiny_llama())


def test_moe_config_problem():
    assert moe_config_problem(tiny_qwen3_moe().config) is None
    assert moe_config_problem({"model_type": "mixtral", "num_local_experts": 8}) is None
    assert "not a mixture of experts" in moe_config_problem({"model_type": "llama"})
    assert "model_type is 'deepseek_v3'" in moe_config_problem({"model_type": "deepseek_v3", "n_routed_experts": 8})
