"""actor_rollout_ref.actor.tis_imp_ratio_cap (upstream's truncated IS of the vanilla PPO loss): hand-computed
weights and loss, and the actor's update (checks before Ray: tests/trainer/config/test_tis_checks.py)."""

from __future__ import annotations

import math

import pytest
import torch

import verl.algos.policy_loss  # noqa: F401 - registers the losses
from tests.workers.actor.test_dp_actor import max_param_diff, tiny_llama, training_batch, updated_params
from verl.algos.registry import get_policy_loss_fn
from verl.algos.tis import tis_weights, truncated_is_weights
from verl.workers.config import FSDPActorConfig


def test_weights_are_the_truncated_ratio_old_over_rollout():
    old = torch.tensor([[math.log(0.5), math.log(0.2), math.log(0.3)]])
    rollout = torch.tensor([[math.log(0.25), math.log(0.4), math.log(0.3)]])
    # ratios 2, 0.5, 1 -> 2 truncated at the cap 1.5
    assert torch.allclose(truncated_is_weights(old, rollout, 1.5), torch.tensor([[1.5, 0.5, 1.0]]))
    with pytest.raises(ValueError, match="tis_imp_ratio_cap must be > 0"):
        truncated_is_weights(old, rollout, -1)
    with pytest.raises(ValueError, match="rollout.calculate_log_probs=true"):
        tis_weights(old, {"old_log_probs": old}, 1.5)


def test_vanilla_loss_weighted_by_hand():
    old = torch.tensor([[math.log(0.5), math.log(0.2)]])
    rollout = torch.tensor([[math.log(0.25), math.log(0.4)]])
    log_prob = old.clone().requires_grad_(True)  # ratio 1: nothing clipped, per-token loss = -A
    advantages = torch.tensor([[1.0, -2.0]])
    mask = torch.ones(1, 2)
    config = FSDPActorConfig()
    weights = truncated_is_weights(old, rollout, 1.5)  # [1.5, 0.5]
    loss, _ = get_policy_loss_fn("vanilla")(old_log_prob=old, log_prob=log_prob, advantages=advantages,
                                            response_mask=mask, loss_agg_mode="token-mean", config=config,
                                            rollout_is_weights=weights)
    # token-mean of [-1 * 1.5, 2 * 0.5] = (-1.5 + 1.0) / 2
    assert loss.item() == pytest.approx(-0.25)
    loss.backward()
    # d/dlog_prob of -A * ratio * w / 2 at ratio 1: [-1.5, 1.0] / 2; the weight itself carries no gradient
    assert torch.allclose(log_prob.grad, torch.tensor([[-0.75, 0.5]]))


def test_the_actor_update_uses_the_truncated_weights():
    torch.manual_seed(0)
    model = tiny_llama()
    data = training_batch(model)
    gen = torch.Generator().manual_seed(3)
    old = data.batch["old_log_probs"]
    data.batch["rollout_log_probs"] = old + 0.7 * torch.randn(old.shape, generator=gen)
    with_tis, _ = updated_params(model, data, tis_imp_ratio_cap=1.2)
    plain, _ = updated_params(model, data)
    assert max_param_diff(with_tis, plain) > 1e-6  # the cap acts
    # the same update as handing the actor the hand-made weights
    weighted = data.select(batch_keys=list(data.batch.keys()))
    weighted.batch["rollout_is_weights"] = torch.exp(old - data.batch["rollout_log_probs"]).clamp(max=1.2)
    by_hand, _ = updated_params(model, weighted)
    assert max_param_diff(with_tis, by_hand) < 1e-6
