"""The DataProto-level steps the trainer calls: apply_kl_penalty and compute_advantage."""

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.config import AlgoConfig, PFPPOConfig
from verl.trainer.ppo import core_algos as ca


def kl_batch():
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    ref = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    log_ratio = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 9.9]])  # 9.9 sits on padding
    return DataProto.from_dict(
        tensors={
            "response_mask": mask,
            "token_level_scores": torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]]),
            "old_log_probs": ref + log_ratio,
            "ref_log_prob": ref,
        }
    )


def test_apply_kl_penalty_fixed():
    data, metrics = ca.apply_kl_penalty(kl_batch(), ca.FixedKLController(0.5), kl_penalty="kl")
    # rewards = scores - 0.5 * k1 on valid tokens, padding untouched
    expected = torch.tensor([[-0.05, -0.1, 1.0 - 0.15], [-0.2, 2.0 - 0.25, 0.0]])
    torch.testing.assert_close(data.batch["token_level_rewards"], expected)
    # mean over sequences of per-sequence mean KL: (0.2 + 0.45) / 2
    assert metrics["actor/reward_kl_penalty"] == pytest.approx(0.325, rel=1e-6)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.5


def test_apply_kl_penalty_updates_the_adaptive_controller_after_using_it():
    ctrl = ca.AdaptiveKLController(init_kl_coef=0.5, target_kl=0.1, horizon=100)
    _, metrics = ca.apply_kl_penalty(kl_batch(), ctrl, kl_penalty="kl")
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.5  # the coefficient used for this batch
    # kl 0.325 / 0.1 - 1 clipped to 0.2; n_steps = batch size 2: 0.5 * (1 + 0.2 * 2 / 100)
    assert ctrl.value == pytest.approx(0.5 * 1.004)


def test_apply_kl_penalty_names_a_missing_key():
    data = kl_batch()
    data.batch = data.batch.exclude("ref_log_prob")
    with pytest.raises(KeyError, match="ref_log_prob"):
        ca.apply_kl_penalty(data, ca.FixedKLController(0.1))


def grpo_batch():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [2.0, 0.0], [0.0, 4.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask, "values": torch.zeros(4, 2)},
        non_tensors={"uid": np.array(["p0", "p0", "p1", "p1"], dtype=object)},
    )


def test_compute_advantage_grpo_writes_advantages_and_returns():
    algo = AlgoConfig(adv_estimator="grpo", norm_adv_by_std_in_grpo=False, gamma=1.0, lam=1.0)
    data = ca.compute_advantage(grpo_batch(), "grpo", norm_adv_by_std_in_grpo=False, config=algo)
    # Dr.GRPO: group p0 scores 1, 0 -> +-0.5; group p1 scores 2, 4 -> -+1
    expected = torch.tensor([[0.5, 0.5], [-0.5, -0.5], [-1.0, 0.0], [1.0, 1.0]])
    torch.testing.assert_close(data.batch["advantages"], expected)
    torch.testing.assert_close(data.batch["returns"], expected)


def test_compute_advantage_gae_uses_values_gamma_and_lam():
    data = grpo_batch()
    data = ca.compute_advantage(data, ca.AdvantageEstimator.GAE, gamma=1.0, lam=1.0)
    # values are 0, gamma = lam = 1: returns are rewards-to-go
    torch.testing.assert_close(data.batch["returns"], torch.tensor([[1.0, 1.0], [0.0, 0.0], [2.0, 0.0], [4.0, 4.0]]))


def test_compute_advantage_passes_reward_baselines_for_remax():
    data = grpo_batch()
    data.batch["reward_baselines"] = torch.tensor([1.0, 1.0, 1.0, 1.0])
    data = ca.compute_advantage(data, "remax")
    torch.testing.assert_close(
        data.batch["advantages"], torch.tensor([[0.0, 0.0], [-1.0, -1.0], [1.0, 0.0], [3.0, 3.0]])
    )


def test_compute_advantage_errors_name_what_is_missing():
    data = grpo_batch()
    data.batch = data.batch.exclude("values")
    with pytest.raises(ValueError, match="values"):
        ca.compute_advantage(data, "gae")
    with pytest.raises(ValueError, match="reward_baselines"):
        ca.compute_advantage(grpo_batch(), "remax")
    with pytest.raises(ValueError, match="Known"):
        ca.compute_advantage(grpo_batch(), "no_such_estimator")
    with pytest.raises(KeyError, match="token_level_scores"):
        ca.compute_advantage(grpo_batch(), "gae", config=AlgoConfig(use_pf_ppo=True))


def test_pf_ppo_resamples_rows_by_score():
    data = grpo_batch()
    data.batch["token_level_scores"] = data.batch["token_level_rewards"].clone()  # scores 1, 0, 2, 4
    algo = AlgoConfig(use_pf_ppo=True, pf_ppo=PFPPOConfig(reweight_method="max_min", weight_pow=2.0))
    torch.manual_seed(0)
    out = ca.compute_advantage(data, "grpo", config=algo)
    # max_min keeps only the best (4, row 3) and the worst (0, row 1); the others weigh 1e-8
    assert len(out) == 4
    assert set(out.batch["token_level_scores"].sum(-1).tolist()) <= {0.0, 4.0}
    assert set(out.non_tensor_batch["uid"].tolist()) <= {"p0", "p1"}
    # rows move together; advantages were computed before resampling: row 1 is (0 - 0.5) / sqrt(0.5) in
    # group p0, row 3 is (4 - 3) / sqrt(2) in group p1 (std-normalised GRPO, eps 1e-6)
    expected = {0.0: -0.5 / (0.5**0.5 + 1e-6), 4.0: 1 / (2**0.5 + 1e-6)}
    for row in range(4):
        score = out.batch["token_level_scores"][row].sum().item()
        assert out.batch["advantages"][row, 0].item() == pytest.approx(expected[score], rel=1e-6)
    with pytest.raises(ValueError, match="reweight_method"):
        ca.compute_pf_ppo_reweight_data(data, "top")


def test_compute_advantage_calls_an_upstream_style_estimator_without_kwargs():
    seen = {}

    @ca.register_adv_est("test_only_narrow")
    def narrow(token_level_rewards, response_mask, index, config=None):
        seen["index"] = list(index)
        return token_level_rewards * 2, token_level_rewards

    try:
        data = ca.compute_advantage(grpo_batch(), "test_only_narrow", gamma=0.9)
    finally:
        del ca.ADV_ESTIMATOR_REGISTRY["test_only_narrow"]
    assert seen["index"] == ["p0", "p0", "p1", "p1"]
    torch.testing.assert_close(data.batch["advantages"], grpo_batch().batch["token_level_rewards"] * 2)
