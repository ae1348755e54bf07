"""Properties of the algorithms library, checked with hypothesis on random small batches."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from verl.trainer.config import AlgoConfig, FSDPActorConfig, PolicyLossConfig
from verl.trainer.ppo import core_algos as ca

FAST = settings(max_examples=50, deadline=None)

POLICY_CONFIG = FSDPActorConfig(
    clip_ratio=0.2,
    clip_ratio_low=0.2,
    clip_ratio_high=0.28,
    clip_ratio_c=3.0,
    policy_loss=PolicyLossConfig(clip_cov_ratio=0.2, clip_cov_lb=-10.0, clip_cov_ub=10.0, kl_cov_ratio=0.2),
)


@st.composite
def batches(draw, min_group=1, max_group=4):
    """A right-padded batch: group sizes, response lengths, and a seed for the tensor contents."""
    sizes = draw(st.lists(st.integers(min_group, max_group), min_size=1, max_size=3))
    width = draw(st.integers(1, 5))
    rows = sum(sizes)
    lengths = draw(st.lists(st.integers(1, width), min_size=rows, max_size=rows))
    seed = draw(st.integers(0, 2**31 - 1))
    discrete = draw(st.booleans())  # 0/1 rewards give the ties and all-equal groups real tasks have
    return sizes, width, lengths, seed, discrete


def make(batch, extra_pad=0):
    """Tensors for a batch; `extra_pad` appends padding columns. Padding holds random garbage throughout,
    and the valid part is identical whatever extra_pad is."""
    sizes, width, lengths, seed, discrete = batch
    gen = torch.Generator().manual_seed(seed)
    rows, full = len(lengths), width + extra_pad
    mask = torch.zeros(rows, full)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    scores = torch.randint(0, 2, (rows,), generator=gen).float() if discrete else torch.randn(rows, generator=gen)
    garbage = torch.randn(rows, full, generator=torch.Generator().manual_seed(seed + extra_pad + 1)) * 7
    rewards = torch.where(mask.bool(), torch.zeros(rows, full), garbage)
    rewards[torch.arange(rows), torch.tensor(lengths) - 1] = scores
    valid_part = torch.randn(rows, width, generator=gen)
    values = torch.where(mask.bool(), _pad_to(valid_part, full), garbage)
    index = np.array([f"g{g}" for g, n in enumerate(sizes) for _ in range(n)], dtype=object)
    return rewards, mask, values, index, scores


def _pad_to(t, width):
    return torch.cat([t, torch.zeros(t.shape[0], width - t.shape[1])], dim=1)


def estimator_kwargs(rewards, mask, values, index):
    return dict(
        token_level_rewards=rewards,
        response_mask=mask,
        values=values,
        index=index,
        gamma=0.9,
        lam=0.95,
        reward_baselines=values[:, 0].clone(),
        config=AlgoConfig(gamma=0.9, lam=0.95),
        norm_adv_by_std_in_grpo=True,
        # the log-prob pass's outputs (optimal_token_baseline): a probability and a sum of squares >= its square
        old_log_probs=-(values.abs() + 0.1),
        sum_pi_squared=torch.exp(-2 * (values.abs() + 0.1)) + 0.1,
    )


# ----------------------------------------------------------------------------------------- estimators
@FAST
@given(batches(), st.booleans())
def test_grpo_advantages_have_zero_mean_per_group(batch, norm):
    rewards, mask, _, index, _ = make(batch)
    adv, _ = ca.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    per_row = adv[torch.arange(len(index)), 0]
    for group in set(index):
        members = torch.tensor(index == group)
        if members.sum() > 1:
            assert abs(per_row[members].mean().item()) < 1e-5


@FAST
@given(batches(min_group=2), st.integers(1, 3))
def test_padding_never_changes_an_estimator(batch, extra_pad):
    base = estimator_kwargs(*make(batch)[:4])
    padded = estimator_kwargs(*make(batch, extra_pad)[:4])
    width = base["response_mask"].shape[1]
    for name in ca.AdvantageEstimator:
        fn = ca.get_adv_estimator_fn(name)
        for out_base, out_pad in zip(fn(**base), fn(**padded)):
            torch.testing.assert_close(out_pad[:, :width], out_base, msg=name.value)
            assert torch.equal(out_pad * (1 - padded["response_mask"]), torch.zeros_like(out_pad)), name


@FAST
@given(batches())
def test_rloo_equals_leave_one_out(batch):
    rewards, mask, _, index, scores = make(batch)
    adv, _ = ca.compute_rloo_outcome_advantage(rewards, mask, index)
    for i in range(len(index)):
        others = [scores[j].item() for j in range(len(index)) if j != i and index[j] == index[i]]
        baseline = sum(others) / len(others) if others else 0.0
        assert adv[i, 0].item() == pytest.approx(scores[i].item() - baseline, abs=1e-5)


@FAST
@given(batches(min_group=2), st.floats(-3, 3))
def test_no_nan_and_zero_advantage_when_all_rewards_are_equal(batch, level):
    sizes, width, lengths, seed, _ = batch
    rewards, mask, values, index, _ = make(batch)
    rewards = torch.where(rewards != 0, torch.zeros_like(rewards), rewards)
    rewards[torch.arange(len(lengths)), torch.tensor(lengths) - 1] = level
    kwargs = estimator_kwargs(rewards, mask, values, index)
    for name in ca.AdvantageEstimator:
        adv, ret = ca.get_adv_estimator_fn(name)(**kwargs)
        assert torch.isfinite(adv).all() and torch.isfinite(ret).all(), name
    for name in ("grpo", "rloo", "opo", "gpg", "grpo_passk", "reinforce_plus_plus_baseline"):
        adv, _ = ca.get_adv_estimator_fn(name)(**kwargs)
        assert torch.equal(adv, torch.zeros_like(adv)), name


@FAST
@given(batches(min_group=1, max_group=1))
def test_groups_of_one_are_finite(batch):
    kwargs = estimator_kwargs(*make(batch)[:4])
    for name in ca.AdvantageEstimator:
        if name is ca.AdvantageEstimator.GRPO_PASSK:
            continue  # needs two responses per prompt and says so
        adv, ret = ca.get_adv_estimator_fn(name)(**kwargs)
        assert torch.isfinite(adv).all() and torch.isfinite(ret).all(), name


# ---------------------------------------------------------------------------------------------- losses
def loss_inputs(batch, extra_pad=0):
    rewards, mask, values, _, _ = make(batch, extra_pad)
    gen = torch.Generator().manual_seed(batch[3] + 99)
    width = batch[1]
    old = _pad_to(torch.randn(mask.shape[0], width, generator=gen) - 1.0, mask.shape[1])
    delta = _pad_to(torch.randn(mask.shape[0], width, generator=gen) * 0.3, mask.shape[1])
    adv = _pad_to(torch.randn(mask.shape[0], width, generator=gen), mask.shape[1])
    garbage = values  # already random on padding
    old = torch.where(mask.bool(), old, garbage)
    new = torch.where(mask.bool(), old + delta, -garbage.abs())
    adv = torch.where(mask.bool(), adv, garbage)
    return old, new, adv, mask


def run_loss(name, old, new, adv, mask, mode="token-mean"):
    new = new.clone().requires_grad_(True)
    torch.manual_seed(0)  # clip_cov picks tokens at random
    loss, metrics = ca.get_policy_loss_fn(name)(old, new, adv, mask, loss_agg_mode=mode, config=POLICY_CONFIG)
    loss.backward()
    return loss.detach(), new.grad, metrics


@FAST
@given(batches(), st.integers(1, 3), st.sampled_from(["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"]))
def test_padding_never_changes_a_loss(batch, extra_pad, mode):
    base = loss_inputs(batch)
    padded = loss_inputs(batch, extra_pad)
    width = base[3].shape[1]
    for name in ca.POLICY_LOSS_REGISTRY:
        loss_b, grad_b, metrics_b = run_loss(name, *base, mode=mode)
        loss_p, grad_p, metrics_p = run_loss(name, *padded, mode=mode)
        torch.testing.assert_close(loss_p, loss_b, msg=name)
        torch.testing.assert_close(grad_p[:, :width], grad_b, msg=name)
        assert torch.equal(grad_p[:, width:], torch.zeros_like(grad_p[:, width:])), name
        assert metrics_p == pytest.approx(metrics_b, abs=1e-6), name


@FAST
@given(batches(), st.integers(1, 3))
def test_padding_never_changes_the_value_loss(batch, extra_pad):
    def value_loss(pad):
        rewards, mask, values, _, _ = make(batch, pad)
        vpreds = (values * 0.5).requires_grad_(True)
        loss, clipfrac = ca.compute_value_loss(vpreds, rewards, values, mask, cliprange_value=0.3)
        loss.backward()
        return loss.detach(), clipfrac, vpreds.grad

    base, padded = value_loss(0), value_loss(extra_pad)
    width = batch[1]
    torch.testing.assert_close(padded[0], base[0])
    torch.testing.assert_close(padded[1], base[1])
    torch.testing.assert_close(padded[2][:, :width], base[2])


@FAST
@given(
    st.lists(st.tuples(st.floats(-8, 8), st.floats(-5, 5)), min_size=1, max_size=12),
    st.floats(0.01, 0.5),
    st.floats(0.01, 0.5),
    st.floats(1.01, 10),
)
def test_dual_clip_bounds_every_token(tokens, low, high, c):
    log_ratio = torch.tensor([[t[0] for t in tokens]])
    adv = torch.tensor([[t[1] for t in tokens]])
    cfg = FSDPActorConfig(clip_ratio=0.2, clip_ratio_low=low, clip_ratio_high=high, clip_ratio_c=c)
    for i in range(len(tokens)):
        only_i = torch.zeros_like(adv)
        only_i[0, i] = 1
        loss, _ = ca.compute_policy_loss_vanilla(
            torch.zeros_like(adv), log_ratio, adv, only_i, loss_agg_mode="token-sum", config=cfg
        )
        a, loss = adv[0, i].item(), loss.item()
        if a > 0:  # -A min(r, clip(r)), and that min lies in (0, 1 + high]
            assert -a * (1 + high) - 1e-4 <= loss <= 0
        elif a < 0:  # |A| max(r, clip(r)) capped at |A| c
            assert abs(a) * (1 - low) - 1e-4 <= loss <= abs(a) * c + 1e-4
        else:
            assert loss == 0


@FAST
@given(st.lists(st.tuples(st.floats(-1e4, 1e4), st.floats(-1e4, 1e4)), min_size=1, max_size=20))
def test_k3_is_non_negative(pairs):
    logp = torch.tensor([p[0] for p in pairs])
    ref = torch.tensor([p[1] for p in pairs])
    for name in ("k3", "low_var_kl", "k3+", "mse", "abs"):
        assert (ca.kl_penalty(logp, ref, name) >= 0).all(), name


@FAST
@given(st.integers(1, 5), st.integers(1, 6), st.integers(0, 4), st.integers(0, 2**31 - 1))
def test_agg_modes_agree_on_equal_length_sequences(rows, length, extra_pad, seed):
    loss_mat = torch.randn(rows, length + extra_pad, generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros_like(loss_mat)
    mask[:, :length] = 1
    token_mean = ca.agg_loss(loss_mat, mask, "token-mean")
    torch.testing.assert_close(ca.agg_loss(loss_mat, mask, "seq-mean-token-mean"), token_mean)
    torch.testing.assert_close(ca.agg_loss(loss_mat, mask, "seq-mean-token-sum"), token_mean * length)
    torch.testing.assert_close(ca.agg_loss(loss_mat, mask, "token-sum"), token_mean * length * rows)
    torch.testing.assert_close(
        ca.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm"), token_mean * length / (length + extra_pad)
    )
    torch.testing.assert_close(
        ca.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm", loss_scale_factor=length), token_mean
    )


@FAST
@given(batches(), st.sampled_from(sorted(ca.POLICY_LOSS_REGISTRY)))
def test_gradients_flow_only_through_log_prob(batch, name):
    old, new, adv, mask = loss_inputs(batch)
    old = old.clone().requires_grad_(True)
    adv = adv.clone().requires_grad_(True)
    new = new.clone().requires_grad_(True)
    weights = torch.rand(mask.shape).requires_grad_(True)
    torch.manual_seed(0)
    loss, _ = ca.get_policy_loss_fn(name)(old, new, adv, mask, config=POLICY_CONFIG, rollout_is_weights=weights)
    loss.backward()
    assert old.grad is None and adv.grad is None and weights.grad is None
    assert new.grad is not None and torch.isfinite(new.grad).all()
    assert math.isfinite(loss.item())
