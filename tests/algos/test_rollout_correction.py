"""Rollout correction math (verl/algos/rollout_correction.py) against numbers worked by hand, plus properties."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verl.algos import policy_loss as pl
from verl.algos.rollout_correction import (
    IS_LEVELS,
    LOSS_TYPES,
    RS_LEVELS,
    apply_bypass_mode,
    apply_rollout_correction,
    bypass_mode_policy_loss,
    compute_is_weights,
    compute_offpolicy_metrics,
    compute_rejection_mask,
    compute_rollout_correction_and_rejection_mask,
    rs_bounds,
)
from verl.protocol import DataProto
from verl.trainer.config import algorithm as algo_cfg

L = math.log
PAD = 100.0  # garbage on padding: nothing may read it


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


# ---------------------------------------------------------------- IS weights, by hand


def test_token_is_weights_truncate_each_token_and_zero_padding():
    # rho = 1.5, 3, 0.5 and one padded position; C = 2
    log_ratio = t([[L(1.5), L(3.0), L(0.5), PAD]])
    mask = t([[1, 1, 1, 0]])
    w, m = compute_is_weights(log_ratio, mask, "token", threshold=2.0)
    assert torch.allclose(w, t([[1.5, 2.0, 0.5, 0.0]]))
    assert m["rollout_is_mean"] == pytest.approx(4 / 3, rel=1e-6)  # (1.5 + 2 + 0.5) / 3: the weights used
    assert m["rollout_is_max"] == pytest.approx(3.0, rel=1e-6)  # the ratio before truncation
    assert m["rollout_is_min"] == pytest.approx(0.5, rel=1e-6)
    assert m["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3)  # 3 > 2
    assert m["rollout_is_ratio_fraction_low"] == 0.0  # 0.5 is not below 1/2
    # ESS = (sum w)^2 / (n sum w^2) = 16 / (3 * (2.25 + 4 + 0.25)) = 16 / 19.5
    assert m["rollout_is_eff_sample_size"] == pytest.approx(16 / 19.5, rel=1e-6)


def test_sequence_is_weight_is_the_truncated_product_broadcast():
    # row 0: exp(0.1 + 0.2) = 1.3499 (padding ignored); row 1: 2 * 2 * 2 = 8 -> truncated to 2
    log_ratio = t([[0.1, 0.2, PAD], [L(2), L(2), L(2)]])
    mask = t([[1, 1, 0], [1, 1, 1]])
    w, m = compute_is_weights(log_ratio, mask, "sequence", threshold=2.0)
    e3 = math.exp(0.3)
    assert torch.allclose(w, t([[e3, e3, 0.0], [2.0, 2.0, 2.0]]), atol=1e-6)
    assert m["rollout_is_seq_max"] == pytest.approx(8.0, rel=1e-5)
    assert m["rollout_is_seq_min"] == pytest.approx(e3, rel=1e-6)
    assert m["rollout_is_seq_mean"] == pytest.approx((e3 + 2) / 2, rel=1e-6)
    assert m["rollout_is_seq_max_deviation"] == pytest.approx(7.0, rel=1e-5)
    assert m["rollout_is_seq_fraction_high"] == 0.5
    # token mean: (2 * 1.3499 + 3 * 2) / 5
    assert m["rollout_is_mean"] == pytest.approx((2 * e3 + 6) / 5, rel=1e-6)


def test_sequence_is_is_safety_bounded_in_log_space():
    # 30 tokens of ratio e: the product e^30 would be 1e13; bounded to e^20 before exponentiating, then truncated
    log_ratio = torch.ones(1, 30)
    w, m = compute_is_weights(log_ratio, torch.ones(1, 30), "sequence", threshold=1e12)
    assert torch.allclose(w, torch.full((1, 30), math.exp(20.0)), rtol=1e-5)
    assert math.isfinite(m["rollout_is_max"])


def test_batch_normalize_token_and_sequence():
    w, m = compute_is_weights(t([[L(1.5), L(3.0), L(0.5), PAD]]), t([[1, 1, 1, 0]]), "token", 2.0,
                              batch_normalize=True)
    assert torch.allclose(w, t([[1.125, 1.5, 0.375, 0.0]]))  # / (4/3)
    assert m["rollout_is_batch_norm_factor"] == pytest.approx(4 / 3, rel=1e-6)
    # sequence level: one weight per sequence, [e^0.3, 2] over mean (e^0.3 + 2)/2, whatever the lengths
    w, _ = compute_is_weights(t([[0.1, 0.2, PAD], [L(2), L(2), L(2)]]), t([[1, 1, 0], [1, 1, 1]]), "sequence", 2.0,
                              batch_normalize=True)
    mean = (math.exp(0.3) + 2) / 2
    assert torch.allclose(w, t([[math.exp(0.3) / mean] * 2 + [0.0], [2 / mean] * 3]), atol=1e-6)


# ---------------------------------------------------------------- rejection sampling, by hand


def test_token_rejection_masks_tokens_outside_the_bounds():
    log_ratio = t([[L(0.4), 0.0, L(2.5), L(1.9), PAD]])
    mask = t([[1, 1, 1, 1, 0]])
    new, m = compute_rejection_mask(log_ratio, mask, "token", lower=0.5, upper=2.0)
    assert torch.equal(new, t([[0, 1, 0, 1, 0]]))
    assert m["rollout_rs_masked_fraction"] == 0.5  # 2 of 4 valid tokens
    assert m["rollout_rs_seq_masked_fraction"] == 1.0


def test_sequence_and_geometric_rejection_differ_on_long_mild_sequences():
    # row 0: three tokens of ratio e^0.25: product e^0.75 = 2.117 (> 2), geometric mean e^0.25 = 1.284
    # row 1: log ratios 0.3, -0.3, 0.2: product e^0.2 = 1.22, geometric mean e^0.0667 = 1.069
    # row 2: one token e^0.9 = 2.46 on its own
    log_ratio = t([[0.25, 0.25, 0.25], [0.3, -0.3, 0.2], [0.9, PAD, PAD]])
    mask = t([[1, 1, 1], [1, 1, 1], [1, 0, 0]])
    seq, m = compute_rejection_mask(log_ratio, mask, "sequence", lower=0.5, upper=2.0)
    assert torch.equal(seq, t([[0, 0, 0], [1, 1, 1], [0, 0, 0]]))
    assert m["rollout_rs_seq_masked_fraction"] == pytest.approx(2 / 3)
    assert m["rollout_rs_masked_fraction"] == pytest.approx(4 / 7)
    geo, _ = compute_rejection_mask(log_ratio, mask, "geometric", lower=1 / 1.3, upper=1.3)
    assert torch.equal(geo, t([[1, 1, 1], [1, 1, 1], [0, 0, 0]]))  # 1.284 and 1.069 kept, 2.46 rejected
    geo, _ = compute_rejection_mask(log_ratio, mask, "geometric", lower=1 / 1.05, upper=1.05)
    assert torch.equal(geo, t([[0, 0, 0], [0, 0, 0], [0, 0, 0]]))  # 1.069 > 1.05 too


def test_veto_rejects_a_whole_sequence_for_one_catastrophic_token():
    log_ratio = t([[0.0, L(1e-5), 0.0], [0.0, L(1e-3), 0.0], [0.0, 0.0, L(1e-9)]])
    mask = t([[1, 1, 1], [1, 1, 1], [1, 1, 0]])  # row 2's catastrophic token is padding: not counted
    new, m = compute_rejection_mask(log_ratio, mask, None, lower=0.5, upper=2.0, veto_threshold=1e-4)
    assert torch.equal(new, t([[0, 0, 0], [1, 1, 1], [1, 1, 0]]))
    assert m == {"rollout_is_veto_fraction": pytest.approx(1 / 3)}


def test_rs_bounds_defaults_follow_upstream():
    assert rs_bounds(None, None, 2.0) == (0.5, 2.0)  # upper from rollout_is_threshold, lower 1/upper
    assert rs_bounds(1.001, None, 2.0) == (pytest.approx(1 / 1.001), 1.001)
    assert rs_bounds(3.0, 0.9, 2.0) == (0.9, 3.0)
    with pytest.raises(ValueError, match="lower < upper"):
        rs_bounds(0.5, None, 2.0)


# ---------------------------------------------------------------- diagnostics, by hand


def test_offpolicy_metrics_by_hand():
    # pi_train = 0.5, 0.5; pi_rollout = 0.25, 1.0: log r = log 2, -log 2
    old = t([[L(0.5), L(0.5), PAD]])
    rollout = t([[L(0.25), 0.0, -PAD]])
    m = compute_offpolicy_metrics(old, rollout, t([[1, 1, 0]]))
    assert m["kl"] == pytest.approx(0.0, abs=1e-7)  # mean(log p_rollout - log p_train) = (-log 2 + log 2) / 2
    assert m["k3_kl"] == pytest.approx(((2 - 1 - L(2)) + (0.5 - 1 + L(2))) / 2, rel=1e-6)  # = 0.25
    assert m["chi2_token"] == pytest.approx((4 + 0.25) / 2 - 1, rel=1e-6)
    assert m["chi2_seq"] == pytest.approx(0.0, abs=1e-6)  # the product of the ratios is 1
    assert m["training_ppl"] == pytest.approx(2.0, rel=1e-6)  # exp(-mean log 0.5)
    assert m["rollout_ppl"] == pytest.approx(2.0, rel=1e-6)  # exp(-(log 0.25 + 0) / 2)
    assert m["log_ppl_diff"] == pytest.approx(0.0, abs=1e-6)
    assert m["ppl_ratio"] == pytest.approx(1.0, rel=1e-6)


def test_kl_sign_when_the_trainer_is_less_confident():
    # rollout 0.8, train 0.4 on the sampled token: k1 = log 0.8 - log 0.4 = log 2, k3 = 0.5 - 1 + log 2
    m = compute_offpolicy_metrics(t([[L(0.4)]]), t([[L(0.8)]]), t([[1]]))
    assert m["kl"] == pytest.approx(L(2), rel=1e-6)
    assert m["k3_kl"] == pytest.approx(0.5 - 1 + L(2), rel=1e-6)
    assert m["log_ppl_diff"] == pytest.approx(L(0.4) - L(0.8), rel=1e-6)  # log_ppl_rollout - log_ppl_training


# ---------------------------------------------------------------- the combined call and the batch stage


def test_combined_call_prefixes_metrics_and_keeps_is_and_rs_separate():
    old = t([[L(3.0), 0.0, L(0.4)]])
    rollout = torch.zeros(1, 3)
    mask = t([[1, 1, 1]])
    w, new_mask, m = compute_rollout_correction_and_rejection_mask(
        old, rollout, mask, rollout_is="token", rollout_is_threshold=2.0, rollout_rs="token")
    assert torch.allclose(w, t([[2.0, 1.0, 0.4]]))  # IS weights are zeroed only on padding
    assert torch.equal(new_mask, t([[0, 1, 0]]))  # rejection lives in the mask
    assert all(k.startswith("rollout_corr/") for k in m)
    assert {"rollout_corr/kl", "rollout_corr/k3_kl", "rollout_corr/rollout_is_mean",
            "rollout_corr/rollout_rs_masked_fraction"} <= set(m)


def test_nothing_set_means_metrics_only():
    mask = t([[1, 1, 0]])
    w, new_mask, m = compute_rollout_correction_and_rejection_mask(t([[-1.0, -2.0, 0]]), t([[-1.1, -2.0, 0]]), mask)
    assert w is None and new_mask is mask
    assert "rollout_corr/kl" in m and not any("rollout_is" in k or "rollout_rs" in k for k in m)


def _batch(old, rollout, mask):
    return DataProto.from_dict(tensors={"old_log_probs": old, "rollout_log_probs": rollout, "response_mask": mask})


def test_apply_rollout_correction_writes_weights_and_the_rejected_mask():
    batch = _batch(t([[L(3.0), 0.0, L(0.4), 0.0]]), torch.zeros(1, 4), t([[1, 1, 1, 0]]))
    cfg = algo_cfg.RolloutCorrectionConfig(rollout_is="token", rollout_rs="token")
    metrics = apply_rollout_correction(batch, cfg)
    assert torch.allclose(batch.batch["rollout_is_weights"], t([[2.0, 1.0, 0.4, 0.0]]))
    assert torch.equal(batch.batch["response_mask"], t([[0, 1, 0, 0]]))
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(2 / 3)


def test_apply_rollout_correction_without_rollout_log_probs_names_the_key():
    batch = DataProto.from_dict(tensors={"old_log_probs": torch.zeros(1, 2), "response_mask": torch.ones(1, 2)})
    with pytest.raises(ValueError, match="calculate_log_probs=true"):
        apply_rollout_correction(batch, algo_cfg.RolloutCorrectionConfig(rollout_is="token"))


def test_apply_bypass_mode_uses_the_rollout_log_probs_as_old():
    rollout = t([[-0.5, -1.5]])
    batch = DataProto.from_dict(tensors={"rollout_log_probs": rollout, "response_mask": torch.ones(1, 2)})
    apply_bypass_mode(batch, algo_cfg.RolloutCorrectionConfig(bypass_mode=True, loss_type="reinforce"))
    assert torch.equal(batch.batch["old_log_probs"], rollout)
    assert batch.meta_info["rollout_correction"]["loss_type"] == "reinforce"


def test_config_names_match_the_algorithm_module():
    assert algo_cfg.ROLLOUT_IS_LEVELS == IS_LEVELS
    assert algo_cfg.ROLLOUT_RS_LEVELS == RS_LEVELS
    assert algo_cfg.ROLLOUT_CORRECTION_LOSS_TYPES == LOSS_TYPES


# ---------------------------------------------------------------- bypass-mode losses


class _Actor:
    clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c = 0.2, 0.2, 0.2, 3.0


def test_bypass_reinforce_is_the_is_weighted_policy_gradient():
    # pi_theta/pi_rollout = 1.5, 3 (-> C = 2), 0.5 on the valid tokens; A = 1, -1, 2
    rollout = t([[-1.0, -2.0, -0.5, 0.0]])
    log_prob = (rollout + t([[L(1.5), L(3.0), L(0.5), 0.0]]))
    log_prob.requires_grad_(True)
    adv = t([[1.0, -1.0, 2.0, 0.0]])
    mask = t([[1, 1, 1, 0]])
    loss_fn = bypass_mode_policy_loss(pl.compute_policy_loss_vanilla,
                                      {"rollout_is": "token", "rollout_is_threshold": 2.0, "loss_type": "reinforce"})
    loss, metrics = loss_fn(old_log_prob=rollout, log_prob=log_prob, advantages=adv, response_mask=mask,
                            loss_agg_mode="token-mean", config=_Actor())
    lp = log_prob.detach()[0]
    expected = -(1.0 * 1.5 * lp[0] + (-1.0) * 2.0 * lp[1] + 2.0 * 0.5 * lp[2]) / 3
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    loss.backward()  # no clipping: d loss / d log p_t = -A_t w_t / 3
    assert torch.allclose(log_prob.grad, t([[-1.5 / 3, 2.0 / 3, -1.0 / 3, 0.0]]), atol=1e-6)
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(3.0, rel=1e-5)


def test_bypass_ppo_clip_is_the_actor_loss_against_the_rollout_policy_with_rejection():
    rollout = t([[-1.0, -2.0, -0.5]])
    log_prob = rollout + t([[0.05, L(3.0), -0.1]])  # the middle token is out of [0.5, 2]: rejected
    adv = t([[1.0, 1.0, -1.0]])
    mask = t([[1, 1, 1]])
    loss_fn = bypass_mode_policy_loss(pl.compute_policy_loss_vanilla, {"rollout_rs": "token", "loss_type": "ppo_clip"})
    loss, metrics = loss_fn(old_log_prob=rollout, log_prob=log_prob, advantages=adv, response_mask=mask,
                            config=_Actor())
    expected, _ = pl.compute_policy_loss_vanilla(rollout, log_prob, adv, t([[1, 0, 1]]), config=_Actor())
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 3)


def test_bypass_ppo_clip_logs_is_weights_without_applying_them():
    rollout = t([[-1.0, -2.0, -0.5, 0.0]])
    log_prob = rollout + t([[L(1.5), L(3.0), L(0.5), 0.0]])  # rho = 1.5, 3 (truncated to 2), 0.5
    adv = t([[1.0, -1.0, 2.0, 0.0]])
    mask = t([[1, 1, 1, 0]])
    loss_fn = bypass_mode_policy_loss(pl.compute_policy_loss_vanilla,
                                      {"rollout_is": "token", "rollout_is_threshold": 2.0, "loss_type": "ppo_clip"})
    loss, metrics = loss_fn(old_log_prob=rollout, log_prob=log_prob, advantages=adv, response_mask=mask,
                            config=_Actor())
    # PPO-clip against pi_rollout, by hand: -min(rho A, clip(rho, 0.8, 1.2) A) per token, mean over 3 tokens
    per_token = [-min(1.5 * 1.0, 1.2 * 1.0), -min(3.0 * -1.0, 1.2 * -1.0), -min(0.5 * 2.0, 0.8 * 2.0)]
    assert loss.item() == pytest.approx(sum(per_token) / 3, rel=1e-5)
    # the weights are still computed and logged: raw max 3, one token of three above the threshold 2, and the
    # truncated weights (1.5, 2, 0.5) average 4/3
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(3.0, rel=1e-5)
    assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3, rel=1e-5)
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(4.0 / 3, rel=1e-5)


# ---------------------------------------------------------------- properties


@st.composite
def _logs_and_mask(draw):
    bs, length = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    floats = st.floats(-6.0, 6.0, allow_nan=False, width=32)
    log_ratio = torch.tensor(draw(st.lists(floats, min_size=bs * length, max_size=bs * length))).view(bs, length)
    lengths = draw(st.lists(st.integers(0, length), min_size=bs, max_size=bs))
    mask = (torch.arange(length).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)).float()
    return log_ratio, mask


@settings(max_examples=60, deadline=None)
@given(_logs_and_mask(), st.sampled_from(IS_LEVELS), st.floats(1.01, 10.0))
def test_is_weights_bounded_nonnegative_and_zero_on_padding(data, level, threshold):
    log_ratio, mask = data
    w, m = compute_is_weights(log_ratio, mask, level, threshold)
    assert (w >= 0).all() and (w <= threshold * (1 + 1e-6)).all()
    assert (w[mask == 0] == 0).all()
    if "rollout_is_eff_sample_size" in m:
        assert 0 < m["rollout_is_eff_sample_size"] <= 1 + 1e-9


@settings(max_examples=60, deadline=None)
@given(_logs_and_mask(), st.sampled_from(IS_LEVELS))
def test_batch_normalized_weights_average_one(data, level):
    log_ratio, mask = data
    w, _ = compute_is_weights(log_ratio, mask, level, 2.0, batch_normalize=True)
    if level == "token" and mask.sum() > 0:
        assert w[mask.bool()].mean().item() == pytest.approx(1.0, rel=1e-4)
    rows = mask.sum(-1) > 0
    if level == "sequence" and rows.any():
        assert w.amax(-1)[rows].mean().item() == pytest.approx(1.0, rel=1e-4)


@settings(max_examples=60, deadline=None)
@given(_logs_and_mask(), st.sampled_from(RS_LEVELS), st.floats(1.01, 5.0), st.floats(1.0, 3.0))
def test_rejection_only_removes_and_is_monotone_in_the_threshold(data, level, upper, widen):
    log_ratio, mask = data
    tight, _ = compute_rejection_mask(log_ratio, mask, level, 1 / upper, upper)
    loose, _ = compute_rejection_mask(log_ratio, mask, level, 1 / (upper * widen), upper * widen)
    assert (tight <= mask).all() and (loose <= mask).all()
    assert (tight <= loose).all()  # widening the bounds never rejects more


@settings(max_examples=40, deadline=None)
@given(_logs_and_mask())
def test_identical_policies_need_no_correction(data):
    log_prob, mask = data
    log_prob = -log_prob.abs()
    w, new_mask, m = compute_rollout_correction_and_rejection_mask(
        log_prob, log_prob.clone(), mask, rollout_is="sequence", rollout_rs="geometric", rollout_rs_threshold=1.0001)
    assert torch.equal(w, mask) and torch.equal(new_mask, mask)
    if mask.sum() > 0:
        assert m["rollout_corr/kl"] == 0.0 and m["rollout_corr/k3_kl"] == 0.0


@settings(max_examples=40, deadline=None)
@given(_logs_and_mask())
def test_k3_and_chi2_are_nonnegative(data):
    log_ratio, mask = data
    rollout = -log_ratio.abs()
    m = compute_offpolicy_metrics(rollout + log_ratio.clamp(max=0), rollout, mask)
    if m:
        assert m["k3_kl"] >= -1e-9 and m["chi2_seq"] >= -1.0 and m["log_ppl_abs_diff"] >= 0
