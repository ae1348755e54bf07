"""Upstream's core_algos names: the vectorized GRPO/RLOO estimators and the registry seen through core_algos."""

import numpy as np
import pytest
import torch

from verl.trainer.ppo import core_algos

# two prompts: "a" with rewards 1, 0, 2 and "b" with 4, 4 (outcome reward on the last response token)
SCORES = [1.0, 0.0, 2.0, 4.0, 4.0]
INDEX = np.array(["a", "a", "a", "b", "b"], dtype=object)


def batch():
    rewards = torch.zeros(5, 3)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 1, 0]], dtype=torch.float32)
    for row, score in enumerate(SCORES):
        rewards[row, int(mask[row].sum()) - 1] = score
    return rewards, mask


def test_grpo_vectorized_matches_hand_computed_and_the_loop_name():
    rewards, mask = batch()
    adv, ret = core_algos.compute_grpo_vectorized_outcome_advantage(rewards, mask, INDEX)
    # group a: mean 1, unbiased std 1 -> 0, -1, 1; group b: mean 4, std 0 -> 0
    expected = torch.tensor([0.0, -1.0 / (1 + 1e-6), 1.0 / (1 + 1e-6), 0.0, 0.0])
    torch.testing.assert_close(adv, expected[:, None] * mask)
    assert torch.equal(adv, ret)
    loop_adv, _ = core_algos.compute_grpo_outcome_advantage(rewards, mask, INDEX)
    assert torch.equal(adv, loop_adv)
    no_std, _ = core_algos.compute_grpo_vectorized_outcome_advantage(rewards, mask, INDEX, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(no_std, torch.tensor([0.0, -1.0, 1.0, 0.0, 0.0])[:, None] * mask)


def test_rloo_vectorized_matches_hand_computed_and_the_loop_name():
    rewards, mask = batch()
    adv, _ = core_algos.compute_rloo_vectorized_outcome_advantage(rewards, mask, INDEX)
    # r_i - mean of the others: a: 1-1, 0-1.5, 2-0.5; b: 4-4, 4-4
    torch.testing.assert_close(adv, torch.tensor([0.0, -1.5, 1.5, 0.0, 0.0])[:, None] * mask)
    assert torch.equal(adv, core_algos.compute_rloo_outcome_advantage(rewards, mask, INDEX)[0])


def test_registry_names_and_custom_estimators_through_core_algos():
    assert core_algos.get_adv_estimator_fn("grpo_vectorized") is core_algos.compute_grpo_vectorized_outcome_advantage
    assert core_algos.get_adv_estimator_fn(core_algos.AdvantageEstimator.RLOO_VECTORIZED) is (
        core_algos.compute_rloo_vectorized_outcome_advantage
    )

    @core_algos.register_adv_est("test_upstream_api_custom")
    def custom(token_level_rewards, response_mask, index=None, config=None, **kwargs):
        return token_level_rewards, token_level_rewards

    assert core_algos.ADV_ESTIMATOR_REGISTRY["test_upstream_api_custom"] is custom
    from verl.algos import ADV_ESTIMATOR_REGISTRY

    assert ADV_ESTIMATOR_REGISTRY is core_algos.ADV_ESTIMATOR_REGISTRY
    with pytest.raises(ValueError, match="already registered"):
        core_algos.register_adv_est("test_upstream_api_custom")(lambda **kw: None)
    del core_algos.ADV_ESTIMATOR_REGISTRY["test_upstream_api_custom"]
