"""Every advantage estimator against hand-computed numbers on small tensors."""

import math

import numpy as np
import pytest
import torch

from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos as ca

EPS = 1e-6


def outcome(scores, lengths, width=None):
    """Rewards with each score on the last valid token, and the matching response_mask."""
    width = width or max(lengths)
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        mask[i, :n] = 1
        if n:
            rewards[i, n - 1] = s
    return rewards, mask


def uids(*names):
    return np.array(list(names), dtype=object)


def first_col(t):
    return t[:, 0].tolist()


def test_registry_holds_every_estimator_under_its_verl_name():
    expected = {
        "gae": ca.compute_gae_advantage_return,
        "grpo": ca.compute_grpo_outcome_advantage,
        "grpo_passk": ca.compute_grpo_passk_outcome_advantage,
        "rloo": ca.compute_rloo_outcome_advantage,
        "reinforce_plus_plus": ca.compute_reinforce_plus_plus_outcome_advantage,
        "reinforce_plus_plus_baseline": ca.compute_reinforce_plus_plus_baseline_outcome_advantage,
        "remax": ca.compute_remax_outcome_advantage,
        "opo": ca.compute_opo_outcome_advantage,
        "gpg": ca.compute_gpg_outcome_advantage,
    }
    for name, fn in expected.items():
        assert ca.get_adv_estimator_fn(name) is fn
        assert ca.get_adv_estimator_fn(ca.AdvantageEstimator(name)) is fn


# ------------------------------------------------------------------------------------------------------- GAE
def test_gae_gamma_lam_one_returns_are_reward_to_go():
    values = torch.tensor([[0.5, 0.2, 0.1]])
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    mask = torch.ones(1, 3)
    adv, ret = ca.compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=1.0)
    # t2: delta = 1 - 0.1 = 0.9 -> A = 0.9; t1: delta = 0.1 - 0.2 = -0.1 -> A = 0.8; t0: 0.2 - 0.5 + 0.8 = 0.5
    raw = [0.5, 0.8, 0.9]
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0]]))  # A + V
    mean = sum(raw) / 3
    std = math.sqrt(sum((a - mean) ** 2 for a in raw) / 2 + 1e-8)
    torch.testing.assert_close(adv, torch.tensor([[(a - mean) / std for a in raw]]))


def test_gae_with_discount():
    values = torch.tensor([[0.5, 0.2, 0.1]])
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    _, ret = ca.compute_gae_advantage_return(rewards, values, torch.ones(1, 3), gamma=0.9, lam=0.8)
    # t2: A = 1 - 0.1 = 0.9
    # t1: delta = 0.9 * 0.1 - 0.2 = -0.11; A = -0.11 + 0.9 * 0.8 * 0.9 = 0.538
    # t0: delta = 0.9 * 0.2 - 0.5 = -0.32; A = -0.32 + 0.72 * 0.538 = 0.06736
    torch.testing.assert_close(ret, torch.tensor([[0.06736 + 0.5, 0.538 + 0.2, 0.9 + 0.1]]))


def test_gae_skips_masked_tokens_inside_a_response():
    values = torch.tensor([[0.5, 9.9, 0.1]])
    rewards = torch.tensor([[0.0, 7.0, 1.0]])  # the 7 sits on a masked (observation) token: ignored
    mask = torch.tensor([[1.0, 0.0, 1.0]])
    _, ret = ca.compute_gae_advantage_return(rewards, values, mask, gamma=1.0, lam=1.0)
    # t2: A = 0.9; t1 skipped; t0: delta = 0 + 0.1 - 0.5 = -0.4, A = -0.4 + 0.9 = 0.5; returns A + V
    torch.testing.assert_close(ret, torch.tensor([[1.0, 0.0, 1.0]]))


def test_gae_without_values_names_the_key():
    with pytest.raises(ValueError, match="values"):
        ca.compute_gae_advantage_return(torch.zeros(1, 2), None, torch.ones(1, 2), 1.0, 1.0)


# ------------------------------------------------------------------------------------------------------ GRPO
def test_grpo_hand_computed():
    rewards, mask = outcome([1.0, 0.0, 2.0, 2.0, 5.0, 3.0], [2, 1, 2, 2, 1, 2])
    adv, ret = ca.compute_grpo_outcome_advantage(rewards, mask, uids("a", "a", "b", "b", "b", "c"))
    # group a: mean 0.5, std sqrt((0.25 + 0.25) / 1) = sqrt(0.5)
    # group b: mean 3, deviations -1 -1 2, std sqrt((1 + 1 + 4) / 2) = sqrt(3)
    # group c (alone): mean 0, std 1 -> the raw score 3 / (1 + eps)
    sa, sb = math.sqrt(0.5), math.sqrt(3)
    expected = [0.5 / (sa + EPS), -0.5 / (sa + EPS), -1 / (sb + EPS), -1 / (sb + EPS), 2 / (sb + EPS), 3 / (1 + EPS)]
    assert first_col(adv) == pytest.approx(expected, rel=1e-6)
    assert torch.equal(adv, ret)
    assert torch.equal(adv * (1 - mask), torch.zeros_like(adv))  # zero on padding
    assert adv[0].tolist() == pytest.approx([expected[0]] * 2)  # broadcast to every valid token


def test_dr_grpo_does_not_divide_by_std():
    rewards, mask = outcome([1.0, 0.0, 2.0, 2.0, 5.0], [1] * 5)
    adv, _ = ca.compute_grpo_outcome_advantage(
        rewards, mask, uids("a", "a", "b", "b", "b"), norm_adv_by_std_in_grpo=False
    )
    assert first_col(adv) == pytest.approx([0.5, -0.5, -1.0, -1.0, 2.0])


def test_grpo_all_equal_rewards_are_exactly_zero():
    rewards, mask = outcome([0.1, 0.1, 0.1, 0.7, 0.7], [3, 1, 2, 3, 3])
    adv, _ = ca.compute_grpo_outcome_advantage(rewards, mask, uids("a", "a", "a", "b", "b"))
    assert torch.equal(adv, torch.zeros_like(adv))


def test_grpo_passk_credits_only_the_best():
    rewards, mask = outcome([0.2, 0.9, 0.5, 1.0, 1.0], [1] * 5)
    index = uids("a", "a", "a", "b", "b")
    adv, _ = ca.compute_grpo_passk_outcome_advantage(rewards, mask, index)
    # group a: best 0.9, second 0.5 -> 0.4; std of (0.2, 0.9, 0.5): mean 1.6/3,
    # squared deviations sum = 0.2**2 + 0.9**2 + 0.5**2 - 1.6**2 / 3, over 2
    std_a = math.sqrt((0.2**2 + 0.9**2 + 0.5**2 - 1.6**2 / 3) / 2)
    # group b: a tie, best - second = 0 whichever wins
    assert first_col(adv) == pytest.approx([0.0, 0.4 / (std_a + EPS), 0.0, 0.0, 0.0], rel=1e-6)
    unnormalised, _ = ca.compute_grpo_passk_outcome_advantage(
        rewards, mask, index, config=AlgoConfig(norm_adv_by_std_in_grpo=False)
    )
    assert first_col(unnormalised) == pytest.approx([0.0, 0.4, 0.0, 0.0, 0.0])


def test_grpo_passk_needs_two_per_group():
    rewards, mask = outcome([1.0, 0.0, 1.0], [1, 1, 1])
    with pytest.raises(ValueError, match="rollout.n"):
        ca.compute_grpo_passk_outcome_advantage(rewards, mask, uids("a", "a", "b"))


# --------------------------------------------------------------------------------------------------- RLOO
def test_rloo_hand_computed():
    rewards, mask = outcome([1.0, 0.0, 0.5, 2.0], [2, 1, 2, 1])
    adv, ret = ca.compute_rloo_outcome_advantage(rewards, mask, uids("a", "a", "a", "solo"))
    # 1 - (0 + 0.5) / 2 = 0.75;  0 - (1 + 0.5) / 2 = -0.75;  0.5 - (1 + 0) / 2 = 0;  alone: baseline 0 -> 2
    assert first_col(adv) == pytest.approx([0.75, -0.75, 0.0, 2.0])
    assert adv[1, 1].item() == 0.0 and torch.equal(adv, ret)


# -------------------------------------------------------------------------------------------- REINFORCE++
def test_reinforce_plus_plus_discounted_and_whitened():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = ca.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config=AlgoConfig(gamma=0.5))
    # row 0: G = [0.25, 0.5, 1]; row 1: G = [1, 2] (+ padding 0)
    torch.testing.assert_close(ret, torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]]))
    # whiten the 5 valid returns: mean 4.75 / 5 = 0.95, squared deviations sum 1.8, unbiased var 1.8 / 4
    std = math.sqrt(0.45 + 1e-8)
    expected = torch.tensor([[0.25 - 0.95, 0.5 - 0.95, 1 - 0.95], [1 - 0.95, 2 - 0.95, 0.0]]) / std
    expected[1, 2] = 0.0
    torch.testing.assert_close(adv, expected)
    # an explicit gamma keyword wins over config.gamma
    _, ret1 = ca.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config=AlgoConfig(gamma=0.5), gamma=1.0)
    torch.testing.assert_close(ret1, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))


def test_reinforce_plus_plus_baseline():
    rewards, mask = outcome([1.0, 0.0], [2, 1])
    adv, _ = ca.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, uids("a", "a"))
    # centred scores +0.5 (2 tokens) and -0.5 (1 token); whiten [0.5, 0.5, -0.5]:
    # mean 1/6, deviations 1/3, 1/3, -2/3, unbiased var (1/9 + 1/9 + 4/9) / 2 = 1/3
    std = math.sqrt(1 / 3 + 1e-8)
    torch.testing.assert_close(adv, torch.tensor([[1 / 3 / std, 1 / 3 / std], [-2 / 3 / std, 0.0]]))


# -------------------------------------------------------------------------------------------- ReMax, OPO, GPG
def test_remax_returns_minus_greedy_baseline():
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = ca.compute_remax_outcome_advantage(rewards, torch.tensor([0.4, 3.0]), mask)
    # returns-to-go: [1, 1, 1] and [2, 2, 0]; minus baselines 0.4 and 3 on valid tokens
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.6, 0.6, 0.6], [-1.0, -1.0, 0.0]]))
    with pytest.raises(ValueError, match="reward_baselines"):
        ca.compute_remax_outcome_advantage(rewards, None, mask)


def test_opo_length_weighted_baseline():
    rewards, mask = outcome([1.0, 0.0, 4.0], [1, 3, 2])
    adv, _ = ca.compute_opo_outcome_advantage(rewards, mask, uids("a", "a", "solo"))
    # baseline a = (1 * 1 + 3 * 0) / (1 + 3) = 0.25; alone: baseline 0
    assert first_col(adv) == pytest.approx([0.75, -0.25, 4.0])


def test_gpg_scales_by_batch_over_nonzero():
    rewards, mask = outcome([1.0, 0.0, 0.0, 1.0], [1, 1, 1, 1])
    adv, _ = ca.compute_gpg_outcome_advantage(rewards, mask, uids("a", "a", "b", "b"))
    # alpha = 4 rows / 2 non-zero rewards = 2; centred +-0.5 -> +-1
    assert first_col(adv) == pytest.approx([1.0, -1.0, -1.0, 1.0])
    halved, _ = ca.compute_gpg_outcome_advantage(rewards, mask, uids("a", "a", "b", "b"), f_norm=2.0)
    assert first_col(halved) == pytest.approx([0.5, -0.5, -0.5, 0.5])


def test_group_estimators_need_an_index():
    rewards, mask = outcome([1.0, 0.0], [1, 1])
    with pytest.raises(ValueError, match="uid"):
        ca.compute_grpo_outcome_advantage(rewards, mask, None)
    with pytest.raises(ValueError, match="3 entries"):
        ca.compute_rloo_outcome_advantage(rewards, mask, uids("a", "a", "b"))


def test_estimators_accept_the_trainers_full_keyword_set():
    rewards, mask = outcome([1.0, 0.0, 0.5, 0.5], [2, 2, 1, 2])
    kwargs = dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=uids("a", "a", "b", "b"),
        epsilon=1e-6,
        norm_adv_by_std_in_grpo=True,
        config=AlgoConfig(gamma=1.0, lam=1.0),
        values=torch.zeros_like(rewards),
        gamma=1.0,
        lam=1.0,
        reward_baselines=torch.zeros(4),
        # the log-prob pass's outputs (compute_advantage hands them over when the batch has them)
        old_log_probs=torch.full_like(rewards, -0.5),
        sum_pi_squared=torch.full_like(rewards, 0.5),
        rollout_is_weights=None,
    )
    for name in ca.AdvantageEstimator:
        adv, ret = ca.get_adv_estimator_fn(name)(**kwargs)
        assert adv.shape == ret.shape == rewards.shape, name
        assert torch.isfinite(adv).all() and torch.isfinite(ret).all(), name
        assert torch.equal(adv * (1 - mask), torch.zeros_like(adv)), name
        assert torch.equal(ret * (1 - mask), torch.zeros_like(ret)), name
