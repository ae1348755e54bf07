"""agg_loss, value and entropy losses, KL estimators and controllers, registries."""

import math

import pytest
import torch

from verl.trainer.config import KLControlConfig
from verl.trainer.ppo import core_algos as ca

LN2 = math.log(2.0)


# ------------------------------------------------------------------------------------------------- agg_loss
def test_agg_loss_modes_hand_computed():
    loss_mat = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [0, 0, 0]])  # the last row is all padding: not a sequence
    assert ca.agg_loss(loss_mat, mask, "token-mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert ca.agg_loss(loss_mat, mask, "token-sum").item() == pytest.approx(10.0)
    # sequence sums 6 and 4
    assert ca.agg_loss(loss_mat, mask, "seq-mean-token-sum").item() == pytest.approx((6 + 4) / 2)
    # sequence means 2 and 4
    assert ca.agg_loss(loss_mat, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    # Dr.GRPO: mean of sequence sums over the padded length 3, or over a fixed factor
    assert ca.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm").item() == pytest.approx(5 / 3)
    assert ca.agg_loss(loss_mat, mask, "seq-mean-token-sum-norm", loss_scale_factor=5).item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="token-mean"):
        ca.agg_loss(loss_mat, mask, "mean")


def test_agg_loss_on_an_all_padding_batch_is_zero_with_zero_gradient():
    loss_mat = torch.ones(2, 3, requires_grad=True)
    for mode in ca.LOSS_AGG_MODES:
        loss = ca.agg_loss(loss_mat, torch.zeros(2, 3), mode)
        loss.backward()
        assert loss.item() == 0.0 and torch.equal(loss_mat.grad, torch.zeros(2, 3)), mode


# ---------------------------------------------------------------------------------------------- value loss
def test_value_loss_clipped():
    vpreds = torch.tensor([[1.0, 0.0, 0.6]], requires_grad=True)
    values = torch.tensor([[0.5, 0.5, 0.5]])
    returns = torch.tensor([[2.0, 0.0, 0.0]])
    loss, clipfrac = ca.compute_value_loss(vpreds, returns, values, torch.ones(1, 3), cliprange_value=0.2)
    # t0: clip 1.0 to [0.3, 0.7] = 0.7: max((1 - 2)^2, (0.7 - 2)^2) = 1.69 (clipped term larger)
    # t1: clip 0.0 to 0.3: max(0, 0.09) = 0.09 (clipped term larger)
    # t2: 0.6 within range: both 0.36, equal -> not counted as clipped
    assert loss.item() == pytest.approx(0.5 * (1.69 + 0.09 + 0.36) / 3)
    assert clipfrac.item() == pytest.approx(2 / 3) and not clipfrac.requires_grad
    loss.backward()
    # clipped terms are flat in vpreds; t2: d/dv 0.5 * (v - 0)^2 / 3 = 0.6 / 3
    torch.testing.assert_close(vpreds.grad, torch.tensor([[0.0, 0.0, 0.2]]))


def test_value_loss_gradient_only_through_vpreds():
    vpreds = torch.tensor([[0.1, 0.2]], requires_grad=True)
    values = torch.tensor([[0.0, 0.0]], requires_grad=True)
    returns = torch.tensor([[1.0, 1.0]], requires_grad=True)
    loss, _ = ca.compute_value_loss(vpreds, returns, values, torch.ones(1, 2), 10.0)
    loss.backward()
    assert values.grad is None and returns.grad is None and vpreds.grad is not None


# ------------------------------------------------------------------------------------------------- entropy
def test_entropy_loss():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [0.0, math.log(3.0), -1e9, -1e9], [5.0, 1.0, 2.0, 3.0]]])
    mask = torch.tensor([[1, 1, 0]])
    # uniform over 4: ln 4; p = (1/4, 3/4): -(1/4 ln 1/4 + 3/4 ln 3/4)
    h1 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert ca.compute_entropy_loss(logits, mask).item() == pytest.approx((math.log(4) + h1) / 2, rel=1e-6)


def test_entropy_from_logits_is_the_one_in_utils():
    from verl.utils import torch_functional

    # one implementation, reachable under upstream's core_algos name
    assert ca.entropy_from_logits is torch_functional.entropy_from_logits
    half = torch.tensor([[0.0, 0.0]], dtype=torch.bfloat16)
    entropy = ca.entropy_from_logits(half)
    assert entropy.dtype == torch.float32 and entropy.item() == pytest.approx(math.log(2), rel=1e-6)


# ---------------------------------------------------------------------------------------------------- KL
@pytest.mark.parametrize(
    "name, expected_fwd, expected_rev",
    [
        # x = log pi - log pi_ref = ln 2 (forward) or -ln 2 (reverse)
        ("kl", LN2, -LN2),
        ("k1", LN2, -LN2),
        ("abs", LN2, LN2),
        ("mse", 0.5 * LN2**2, 0.5 * LN2**2),
        ("k2", 0.5 * LN2**2, 0.5 * LN2**2),
        # k3 = e^y - 1 - y with y = -x: e^-ln2 - 1 + ln2 = 0.5 - 1 + ln2;  e^ln2 - 1 - ln2 = 1 - ln2
        ("low_var_kl", 0.5 - 1 + LN2, 1 - LN2),
        ("k3", 0.5 - 1 + LN2, 1 - LN2),
    ],
)
def test_kl_estimators(name, expected_fwd, expected_rev):
    half, quarter = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert ca.kl_penalty(half, quarter, name).item() == pytest.approx(expected_fwd, rel=1e-6)
    assert ca.kl_penalty(quarter, half, name).item() == pytest.approx(expected_rev, rel=1e-6)


def test_k3_is_clamped():
    # y = log pi_ref - log pi = -50 -> clamped to -20: e^-20 - 1 + 20 ~ 19 -> clamped to 10
    assert ca.kl_penalty(torch.tensor([0.0]), torch.tensor([-50.0]), "k3").item() == 10.0


@pytest.mark.parametrize("name", ["k1+", "kl+", "k3+", "low_var_kl+", "abs+"])
def test_straight_through_value_of_estimator_gradient_of_k2(name):
    logprob = torch.tensor([math.log(0.5)], requires_grad=True)
    ref = torch.tensor([math.log(0.25)])
    value = ca.kl_penalty(logprob, ref, name)
    assert value.item() == pytest.approx(ca.kl_penalty(logprob, ref, name[:-1]).item())
    value.backward()
    # d/dlogp 0.5 (logp - ref)^2 = logp - ref = ln 2
    assert logprob.grad.item() == pytest.approx(LN2, rel=1e-6)


def test_plain_k3_gradient_differs_from_k2():
    logprob = torch.tensor([math.log(0.5)], requires_grad=True)
    ca.kl_penalty(logprob, torch.tensor([math.log(0.25)]), "k3").backward()
    # d/dlogp (e^y - 1 - y), y = ref - logp: -(e^y - 1) = 1 - 0.5
    assert logprob.grad.item() == pytest.approx(0.5, rel=1e-6)


def test_kl_unknown_and_full():
    x = torch.zeros(1)
    with pytest.raises(NotImplementedError, match="full"):
        ca.kl_penalty(x, x, "full")
    with pytest.raises(ValueError, match="low_var_kl"):
        ca.kl_penalty(x, x, "k4")


def test_compute_rewards():
    out = ca.compute_rewards(torch.tensor([1.0]), torch.tensor([-1.0]), torch.tensor([-1.5]), kl_ratio=0.1)
    assert out.item() == pytest.approx(1.0 - 0.1 * 0.5)


# --------------------------------------------------------------------------------------------- controllers
def test_adaptive_kl_controller():
    ctrl = ca.get_kl_controller(KLControlConfig(type="adaptive", kl_coef=0.1, target_kl=0.05, horizon=100))
    ctrl.update(current_kl=0.1, n_steps=10)
    # error = clip(0.1 / 0.05 - 1, -0.2, 0.2) = 0.2; value *= 1 + 0.2 * 10 / 100
    assert ctrl.value == pytest.approx(0.1 * 1.02)
    ctrl.update(current_kl=0.045, n_steps=10)
    # error = 0.045 / 0.05 - 1 = -0.1; value *= 1 - 0.1 * 10 / 100
    assert ctrl.value == pytest.approx(0.1 * 1.02 * 0.99)


def test_fixed_kl_controller_and_errors():
    ctrl = ca.get_kl_controller(KLControlConfig(type="fixed", kl_coef=0.3))
    ctrl.update(current_kl=5.0, n_steps=100)
    assert isinstance(ctrl, ca.FixedKLController) and ctrl.value == 0.3
    with pytest.raises(ValueError, match="horizon"):
        ca.get_kl_controller(KLControlConfig(type="adaptive", kl_coef=0.1, target_kl=0.1, horizon=0))
    with pytest.raises(ValueError, match="kl_ctrl.type"):
        ca.get_kl_controller(KLControlConfig(type="pid"))


# ------------------------------------------------------------------------------------------------ registry
def test_registering_a_different_function_under_a_taken_name_fails():
    def my_grpo(**kwargs):
        return None

    with pytest.raises(ValueError, match="already registered"):
        ca.register_adv_est("grpo")(my_grpo)
    with pytest.raises(ValueError, match="already registered"):
        ca.register_policy_loss("vanilla")(my_grpo)
    # the same function again is fine (re-imports)
    ca.register_adv_est(ca.AdvantageEstimator.GRPO)(ca.compute_grpo_outcome_advantage)


def test_custom_registration_and_unknown_names():
    @ca.register_adv_est("test_only_constant")
    def constant(token_level_rewards, response_mask, **kwargs):
        return response_mask, response_mask

    try:
        assert ca.get_adv_estimator_fn("test_only_constant") is constant
    finally:
        del ca.ADV_ESTIMATOR_REGISTRY["test_only_constant"]
    with pytest.raises(ValueError, match="algorithm.adv_estimator.*'gae'"):
        ca.get_adv_estimator_fn("nope")


def test_enum_values():
    assert [e.value for e in ca.AdvantageEstimator] == [
        "gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo",
        "grpo_passk", "gpg", "grpo_vectorized", "rloo_vectorized", "optimal_token_baseline",
        "tir_optimal_token_baseline",
    ]  # fmt: skip
    assert ca.AdvantageEstimator.GRPO == "grpo"
