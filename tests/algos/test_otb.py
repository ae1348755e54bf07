"""The optimal token baseline (algorithm.adv_estimator=optimal_token_baseline / tir_optimal_token_baseline) against
hand-computed cases and properties, sum_pi_squared against the softmax, and the actor's log-prob pass returning it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.algos import compute_advantage, get_adv_estimator_fn
from verl.algos.otb import (
    compute_multi_turn_optimal_token_baseline_advantage as tir_otb,
)
from verl.algos.otb import (
    compute_optimal_token_baseline_advantage as otb,
)
from verl.algos.otb import sum_pi_squared_from_logits


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


def _close(got: torch.Tensor, want) -> bool:
    return torch.allclose(got.double(), torch.tensor(want, dtype=torch.float64), atol=1e-6)


def test_hand_computed_group_of_two():
    # Two responses to one prompt. Row a: 3 tokens, reward 1 on its last; row b: 2 tokens, reward 0.
    # pi = 0.5 on every token and sum_pi^2 = 0.5, so w = 1 - 2(0.5) + 0.5 = 0.5 per token: W = 0.5, 1.0, 1.5.
    # returns G: a = (1, 1, 1), b = (0, 0, 0).
    # t=0: B = (1*0.5 + 0*0.5) / (0.5 + 0.5) = 0.5; t=1: B = (1*1 + 0*1) / 2 = 0.5;
    # t=2: only a is valid: B = 1 * 1.5 / 1.5 = 1, but a is the lone longest row and b has 2 tokens, so with
    # handle_zero_tail its baseline there is 0: A_a = (0.5, 0.5, 1), A_b = (-0.5, -0.5, pad 0).
    rewards = _t([[0, 0, 1], [0, 0, 0]])
    mask = _t([[1, 1, 1], [1, 1, 0]])
    log_pi = torch.full((2, 3), math.log(0.5))
    spsq = torch.full((2, 3), 0.5)
    adv, ret = otb(rewards, mask, np.array(["p", "p"]), log_pi, spsq)
    assert _close(adv, [[0.5, 0.5, 1.0], [-0.5, -0.5, 0.0]])
    assert _close(ret, [[1, 1, 1], [0, 0, 0]])
    adv_no_tail, _ = otb(rewards, mask, np.array(["p", "p"]), log_pi, spsq, handle_zero_tail=False)
    assert _close(adv_no_tail, [[0.5, 0.5, 0.0], [-0.5, -0.5, 0.0]])


def test_the_energy_weights_the_baseline():
    # One token each, rewards 1 and 0. Row a: pi = 0.9, sum_pi^2 = 0.82 -> w = 1 - 1.8 + 0.82 = 0.02;
    # row b: pi = 0.1, sum_pi^2 = 0.82 -> w = 1 - 0.2 + 0.82 = 1.62. B = (1 * 0.02) / (0.02 + 1.62) = 0.0121951...
    rewards, mask = _t([[1.0], [0.0]]), _t([[1.0], [1.0]])
    adv, _ = otb(rewards, mask, ["p", "p"], torch.log(_t([[0.9], [0.1]])), _t([[0.82], [0.82]]))
    baseline = 0.02 / 1.64
    assert _close(adv, [[1 - baseline], [-baseline]])
    # rollout IS weights scale each w by rho^2: rho_a = 3 makes w_a = 0.18 -> B = 0.18 / 1.80 = 0.1
    adv_is, _ = otb(rewards, mask, ["p", "p"], torch.log(_t([[0.9], [0.1]])), _t([[0.82], [0.82]]),
                    rollout_is_weights=_t([[3.0], [1.0]]))
    assert _close(adv_is, [[0.9], [-0.1]])


def test_properties():
    gen = torch.Generator().manual_seed(0)
    bs, length = 6, 7
    rewards = torch.zeros(bs, length)
    lengths = [7, 5, 7, 3, 6, 6]
    mask = torch.zeros(bs, length)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
        rewards[i, n - 1] = float(torch.rand(1, generator=gen))
    pi = torch.rand(bs, length, generator=gen).clamp(0.05, 0.95)
    log_pi = torch.log(pi)
    # a real distribution has sum_v pi_v^2 between pi_j^2 (the sampled token alone) and 1: then w >= (1 - pi_j)^2
    spsq = pi.square() + torch.rand(bs, length, generator=gen) * (1 - pi.square())
    index = ["a", "a", "b", "c", "c", "c"]
    adv, ret = otb(rewards, mask, index, log_pi, spsq)
    assert torch.equal(adv * (1 - mask), torch.zeros_like(adv))  # padding stays 0
    assert adv[2].tolist() == pytest.approx(ret[2].tolist())  # a group of one: no baseline, A = G
    # identical rows: the baseline is their common return, so every advantage is 0
    same = otb(rewards[[0, 0]], mask[[0, 0]], ["x", "x"], log_pi[[0, 0]], spsq[[0, 0]])[0]
    assert same.abs().max() < 1e-6
    # the baseline is a W-weighted mean (W >= 0) of the returns of the group's rows valid at t: between their min
    # and max (group c: rows 3, 4, 5 of lengths 3, 6, 6; no lone longest row, so no zero tail)
    group = torch.tensor([3, 4, 5])
    baseline = ret[group] - adv[group]
    valid = mask[group].bool()
    big = torch.full_like(ret[group], float("inf"))
    low = torch.where(valid, ret[group], big).min(0).values
    high = torch.where(valid, ret[group], -big).max(0).values
    inside = (baseline >= low - 1e-6) & (baseline <= high + 1e-6)
    assert bool(inside[valid].all())


def test_tir_skips_tool_tokens_inside_the_response():
    # Row a: generated, tool(2 tokens), generated, generated; row b: 3 generated tokens. Packed, both are 3 tokens
    # long, so TIR equals OTB on the packed rows, scattered back to a's generated positions.
    mask = _t([[1, 0, 0, 1, 1], [1, 1, 1, 0, 0]])
    rewards = _t([[0, 0, 0, 0, 1.0], [0, 0, 0.5, 0, 0]])
    log_pi = torch.log(_t([[0.5, 0.9, 0.9, 0.3, 0.7], [0.2, 0.4, 0.6, 0.1, 0.1]]))
    spsq = _t([[0.4, 0.2, 0.2, 0.5, 0.3], [0.3, 0.35, 0.45, 0.1, 0.1]])
    got, _ = tir_otb(rewards, mask, ["p", "p"], log_pi, spsq)
    cols = [0, 3, 4]
    packed, _ = otb(torch.stack([rewards[0, cols], rewards[1, :3]]), torch.ones(2, 3), ["p", "p"],
                    torch.stack([log_pi[0, cols], log_pi[1, :3]]), torch.stack([spsq[0, cols], spsq[1, :3]]))
    assert got[0, cols].tolist() == pytest.approx(packed[0].tolist(), abs=1e-6)
    assert got[1, :3].tolist() == pytest.approx(packed[1].tolist(), abs=1e-6)
    assert got[0, [1, 2]].abs().sum() == 0 and got[1, 3:].abs().sum() == 0
    # without holes and with equal lengths the two estimators agree
    full = torch.ones(2, 5)
    assert torch.allclose(tir_otb(rewards, full, ["p", "p"], log_pi, spsq)[0], otb(rewards, full, ["p", "p"],
                                                                                     log_pi, spsq)[0], atol=1e-6)


def test_missing_inputs_name_the_key_and_compute_advantage_passes_them():
    from verl.protocol import DataProto

    rewards, mask = _t([[1.0], [0.0]]), _t([[1.0], [1.0]])
    with pytest.raises(ValueError, match="calculate_sum_pi_squared=true"):
        otb(rewards, mask, ["p", "p"], torch.zeros(2, 1), None)
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask,
                                        "old_log_probs": torch.log(_t([[0.9], [0.1]])),
                                        "sum_pi_squared": _t([[0.82], [0.82]])},
                               non_tensors={"uid": np.array(["p", "p"], dtype=object)})
    out = compute_advantage(data, "optimal_token_baseline")
    assert _close(out.batch["advantages"], [[1 - 0.02 / 1.64], [-0.02 / 1.64]])
    assert get_adv_estimator_fn("tir_optimal_token_baseline") is tir_otb


def test_sum_pi_squared_is_the_softmax_squared_summed():
    assert sum_pi_squared_from_logits(torch.zeros(4, 8)).tolist() == pytest.approx([1 / 8] * 4)  # uniform: 1/V
    assert float(sum_pi_squared_from_logits(torch.tensor([100.0, 0.0, 0.0]))) == pytest.approx(1.0)  # one-hot
    logits = torch.randn(3, 5, 50, generator=torch.Generator().manual_seed(2)) * 4
    want = torch.softmax(logits.double(), -1).square().sum(-1)
    assert torch.allclose(sum_pi_squared_from_logits(logits).double(), want, atol=1e-6)


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "remove_padding"])
def test_the_actor_log_prob_pass_returns_sum_pi_squared_at_the_temperature(packed):
    from tests.helpers.tiny_model import tiny_llama
    from tests.workers.actor.test_dp_actor import actor_config, training_batch
    from verl.workers.actor import DataParallelPPOActor

    model = tiny_llama()
    data = training_batch(model, temperature=0.7, micro_batch_size=2)
    actor = DataParallelPPOActor(actor_config(use_remove_padding=packed, calculate_sum_pi_squared=True), model)
    actor.compute_log_prob(data, calculate_sum_pi_squared=True)
    got = actor.last_sum_pi_squared
    b = data.batch
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits
    response_length = b["responses"].size(1)
    want = torch.softmax(logits[:, -response_length - 1:-1].double() / 0.7, -1).square().sum(-1)
    mask = b["response_mask"].bool()
    assert torch.allclose(got[mask].double(), want[mask], atol=1e-5)
    actor.compute_log_prob(data)  # not asked: nothing kept
    assert actor.last_sum_pi_squared is None


def test_the_estimator_needs_calculate_sum_pi_squared_before_ray_and_the_pass_is_not_skipped():
    from verl.trainer.config import ConfigError, validate_config
    from verl.trainer.config.old_log_prob_reuse import decide_old_log_prob_reuse
    from verl.trainer.config.validate import load_config

    base = ["algorithm.adv_estimator=optimal_token_baseline", "actor_rollout_ref.rollout.n=4"]
    with pytest.raises(ConfigError, match="actor_rollout_ref.actor.calculate_sum_pi_squared=true"):
        validate_config(load_config(base), check_files=False)
    cfg = validate_config(load_config([*base, "actor_rollout_ref.actor.calculate_sum_pi_squared=true"]),
                          check_files=False)
    decision = decide_old_log_prob_reuse(cfg)
    assert not decision.reuse and any("calculate_sum_pi_squared" in b for b in decision.blockers)
    # n=1 is allowed (upstream: the baseline collapses to the returns)
    validate_config(load_config([*base, "actor_rollout_ref.rollout.n=1",
                                 "actor_rollout_ref.actor.calculate_sum_pi_squared=true"]), check_files=False)


def test_sum_pi_squared_checkpointing_keeps_less_and_gives_the_same_gradient():
    from tests.workers.actor.test_dp_actor import actor_config
    from tests.workers.actor.test_entropy_keys import _saved_bytes
    from verl.workers.actor.entropy import sum_pi_squared_function

    logits = torch.randn(64, 500, generator=torch.Generator().manual_seed(1), requires_grad=True)
    plain_bytes, plain_grad = _saved_bytes(sum_pi_squared_function(actor_config()), logits)
    kept_bytes, kept_grad = _saved_bytes(sum_pi_squared_function(actor_config(sum_pi_squared_checkpointing=True)),
                                         logits)
    assert torch.allclose(kept_grad, plain_grad, atol=1e-7)
    assert plain_bytes - kept_bytes >= 64 * 500 * 4, (plain_bytes, kept_bytes)  # no (64 x 500) float32 kept
    with torch.no_grad():  # the log-prob pass: nothing to recompute, the plain function runs
        assert torch.equal(sum_pi_squared_function(actor_config(sum_pi_squared_checkpointing=True))(logits),
                           sum_pi_squared_from_logits(logits))
