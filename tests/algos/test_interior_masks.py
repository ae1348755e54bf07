"""Multi-turn responses: tool / user tokens sit inside the response with response_mask 0. Hand-computed cases for
what is trained on and how the advantage, KL and entropy treat those interior zeros."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from verl.algos.advantage import compute_gae_advantage_return, compute_grpo_outcome_advantage
from verl.algos.batch import apply_kl_penalty
from verl.algos.kl import FixedKLController
from verl.algos.losses import agg_loss
from verl.algos.policy_loss import compute_policy_loss
from verl.protocol import DataProto

# model, model, tool, tool, model  (the reward sits on the last model token)
MASK = torch.tensor([[1, 1, 0, 0, 1]], dtype=torch.float32)


def test_gae_skips_tool_tokens_hand_computed():
    gamma, lam = 0.9, 0.8
    rewards = torch.tensor([[0.0, 0.0, 0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 9.0, 9.0, 0.8]])  # tool-token values must not enter
    advantages, returns = compute_gae_advantage_return(rewards, values, MASK, gamma, lam)
    # the chain runs over positions 0, 1, 4 as if adjacent:
    a4 = 1.0 - 0.8                                  # delta_4, no next value
    a1 = (gamma * 0.8 - 0.6) + gamma * lam * a4     # next value is V_4, not V_2
    a0 = (gamma * 0.6 - 0.5) + gamma * lam * a1
    expected_returns = [a0 + 0.5, a1 + 0.6, 0.0, 0.0, a4 + 0.8]
    assert returns[0].tolist() == pytest.approx(expected_returns, abs=1e-6)
    raw = torch.tensor([a0, a1, a4], dtype=torch.float64)
    whitened = (raw - raw.mean()) / torch.sqrt(raw.var(unbiased=True) + 1e-8)
    assert advantages[0, [0, 1, 4]].tolist() == pytest.approx(whitened.tolist(), abs=1e-5)
    assert advantages[0, [2, 3]].tolist() == [0.0, 0.0]
    # the values at tool tokens change nothing
    other, other_returns = compute_gae_advantage_return(rewards, values.index_put((torch.tensor([0, 0]),
                                                        torch.tensor([2, 3])), torch.tensor([-50.0, 70.0])),
                                                        MASK, gamma, lam)
    assert torch.equal(other, advantages) and torch.equal(other_returns, returns)


def test_grpo_credits_only_model_tokens():
    mask = torch.cat([MASK, torch.tensor([[1, 0, 1, 1, 0]], dtype=torch.float32)])
    rewards = torch.tensor([[0, 0, 0, 0, 1.0], [0, 0, 0, 0.0, 0]])
    advantages, _ = compute_grpo_outcome_advantage(rewards, mask, np.array(["g", "g"], dtype=object))
    # scores 1 and 0 in one group: mean 0.5, unbiased std sqrt(0.5) -> +-0.7071 on each row's model tokens only
    a = 0.5 / math.sqrt(0.5)
    assert torch.allclose(advantages, torch.tensor([[a, a, 0, 0, a], [-a, 0, -a, -a, 0]]), atol=1e-5)


def test_kl_in_reward_is_zero_on_tool_tokens_and_averaged_over_model_tokens():
    old = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -1.5]])
    ref = torch.tensor([[-1.5, -1.0, -9.0, -9.0, -1.0]])
    data = DataProto.from_dict({"response_mask": MASK, "token_level_scores": torch.tensor([[0, 0, 0, 0, 1.0]]),
                                "old_log_probs": old, "ref_log_prob": ref})
    data, metrics = apply_kl_penalty(data, FixedKLController(0.1), kl_penalty="kl")
    kl = [0.5, -1.0, 0.0, 0.0, -0.5]  # log p - log ref on model tokens; nothing on the tool tokens
    assert data.batch["token_level_rewards"][0].tolist() == pytest.approx([-0.05, 0.1, 0, 0, 1.05], abs=1e-6)
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(sum(kl) / 3)


def test_policy_loss_and_entropy_use_model_tokens_only_and_tool_tokens_get_no_gradient():
    old = torch.tensor([[-1.0, -1.0, -1.0, -1.0, -1.0]])
    log_prob = old.clone().requires_grad_(True)
    advantages = torch.tensor([[1.0, 2.0, 100.0, 100.0, 3.0]])  # tool-token entries must not count
    loss, _, _, _ = compute_policy_loss(old, log_prob, advantages, MASK, cliprange=0.2)
    assert loss.item() == pytest.approx(-(1 + 2 + 3) / 3)  # ratio 1: -mean(A) over the model tokens
    loss.backward()
    assert log_prob.grad[0, [2, 3]].tolist() == [0.0, 0.0]
    assert log_prob.grad[0, [0, 1, 4]].tolist() == pytest.approx([-1 / 3, -2 / 3, -1.0])
    entropy = torch.tensor([[0.2, 0.4, 7.0, 7.0, 0.6]])
    assert agg_loss(entropy, MASK, "token-mean").item() == pytest.approx(0.4)
    assert agg_loss(entropy, MASK, "seq-mean-token-sum").item() == pytest.approx(1.2)
