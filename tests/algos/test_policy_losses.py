"""Every policy loss against hand-computed numbers; gradients checked where the math is simple."""

import math

import pytest
import torch

from verl.trainer.config import FSDPActorConfig, PolicyLossConfig
from verl.trainer.ppo import core_algos as ca

METRIC_KEYS = {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}


def logp(*probs_or_ratios):
    return torch.log(torch.tensor([list(probs_or_ratios)], dtype=torch.float32)).requires_grad_(True)


def actor(clip=None, policy_loss=None, **kwargs):
    """An FSDPActorConfig; ``clip`` sets clip_ratio and both of its low/high bounds."""
    if clip is not None:
        kwargs.update(clip_ratio=clip, clip_ratio_low=clip, clip_ratio_high=clip)
    return FSDPActorConfig(**kwargs, policy_loss=PolicyLossConfig(**(policy_loss or {})))


def run(name, old, new, adv, mask=None, mode="token-mean", config=None):
    mask = torch.ones_like(adv) if mask is None else mask
    loss, metrics = ca.get_policy_loss_fn(name)(old, new, adv, mask, loss_agg_mode=mode, config=config)
    assert set(metrics) >= METRIC_KEYS and all(isinstance(v, float) for v in metrics.values())
    return loss, metrics


def test_registry_names():
    expected = {
        "vanilla": ca.compute_policy_loss_vanilla,
        "gspo": ca.compute_policy_loss_gspo,
        "gpg": ca.compute_policy_loss_gpg,
        "clip_cov": ca.compute_policy_loss_clip_cov,
        "kl_cov": ca.compute_policy_loss_kl_cov,
        "geo_mean": ca.compute_policy_loss_geo_mean,
        "cispo": ca.compute_policy_loss_cispo,
        "sapo": ca.compute_policy_loss_sapo,
        "reinforce": ca.compute_policy_loss_reinforce,
    }
    for name, fn in expected.items():
        assert ca.get_policy_loss_fn(name) is fn


# ---------------------------------------------------------------------------------------------------- vanilla
def test_vanilla_dual_clip_hand_computed():
    old = torch.zeros(1, 4)
    new = logp(1.5, 0.5, 4.0, 1.0)  # ratios, since old log-probs are 0
    adv = torch.tensor([[1.0, -1.0, -1.0, 2.0]])
    loss, m = run("vanilla", old, new, adv, config=actor(clip=0.2, clip_ratio_c=3.0))
    # t0: A=1, r=1.5: max(-1.5, -1.2) = -1.2 (clipped)
    # t1: A=-1, r=0.5: max(0.5, 0.8) = 0.8 (clipped); dual cap 3 not hit
    # t2: A=-1, r=4: max(4, 1.2) = 4, dual cap min(4, 3) = 3 (lower clip)
    # t3: A=2, r=1: -2
    assert loss.item() == pytest.approx((-1.2 + 0.8 + 3.0 - 2.0) / 4)
    assert m["actor/pg_clipfrac"] == pytest.approx(2 / 4)
    assert m["actor/pg_clipfrac_lower"] == pytest.approx(1 / 4)
    assert m["actor/ppo_kl"] == pytest.approx(-(math.log(1.5) + math.log(0.5) + math.log(4.0)) / 4, rel=1e-6)
    loss.backward()
    # only t3 is unclipped: d(-A r)/d log r = -A r = -2, over 4 tokens
    torch.testing.assert_close(new.grad, torch.tensor([[0.0, 0.0, 0.0, -0.5]]))


def test_vanilla_clip_higher_is_asymmetric():
    old = torch.zeros(1, 2)
    new = logp(1.5, 0.5)
    adv = torch.tensor([[1.0, -1.0]])
    cfg = actor(clip_ratio=0.2, clip_ratio_low=0.2, clip_ratio_high=0.28)
    loss, _ = run("vanilla", old, new, adv, config=cfg)
    # t0: clip to 1 + 0.28 -> -1.28; t1: clip to 1 - 0.2 -> 0.8
    assert loss.item() == pytest.approx((-1.28 + 0.8) / 2)


def test_vanilla_log_ratio_is_clamped():
    old = torch.tensor([[-100.0]])
    new = torch.tensor([[0.0]], requires_grad=True)
    adv = torch.tensor([[-1.0]])
    loss, m = run("vanilla", old, new, adv, config=actor(clip_ratio_c=10.0))
    # log ratio 100 -> clamped to 20; dual cap -A * c = 10 bounds the loss
    assert loss.item() == pytest.approx(10.0)
    assert m["actor/ppo_kl"] == pytest.approx(-20.0)


def test_vanilla_reads_the_typed_actor_config():
    old, adv = torch.zeros(1, 1), torch.tensor([[1.0]])
    new = logp(1.5)
    assert run("vanilla", old, new, adv, config=actor(clip=0.1))[0].item() == pytest.approx(-1.1)
    # the dataclass defaults: clip_ratio_low/high 0.2
    assert run("vanilla", old, new, adv, config=FSDPActorConfig())[0].item() == pytest.approx(-1.2)
    # a null bound follows clip_ratio, as upstream (a user's own config object may leave them unset)
    unset = actor(clip_ratio=0.1, clip_ratio_low=None, clip_ratio_high=None)
    assert run("vanilla", old, new, adv, config=unset)[0].item() == pytest.approx(-1.1)
    with pytest.raises(TypeError, match="actor config"):
        run("vanilla", old, new, adv)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        run("vanilla", old, new, adv, config=actor(clip_ratio_c=1.0))


def test_legacy_compute_policy_loss_matches():
    old = torch.zeros(1, 4)
    new = logp(1.5, 0.5, 4.0, 1.0)
    adv = torch.tensor([[1.0, -1.0, -1.0, 2.0]])
    loss, clipfrac, ppo_kl, lower = ca.compute_policy_loss(old, new, adv, torch.ones(1, 4), cliprange=0.2)
    assert loss.item() == pytest.approx(0.15)
    assert clipfrac.item() == pytest.approx(0.5) and lower.item() == pytest.approx(0.25)


# ------------------------------------------------------------------------------------------------------- GSPO
def test_gspo_sequence_ratio():
    old = torch.zeros(2, 2)
    new = torch.tensor([[0.1, 0.3], [-0.05, 0.05]], requires_grad=True)  # log ratios
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    loss, m = run("gspo", old, new, adv, config=actor(clip=0.2))
    # seq 0: s = exp((0.1 + 0.3) / 2) = exp(0.2) = 1.2214 > 1.2 -> clipped, loss -1.2 on each token
    # seq 1: s = exp(0) = 1 -> loss 1 on each token; seq-mean-token-mean: (-1.2 + 1) / 2
    assert loss.item() == pytest.approx(-0.1)
    assert m["actor/pg_clipfrac"] == pytest.approx(0.5)
    loss.backward()
    # clipped seq: no gradient; seq 1: d/dlogp_t (-A s) = -A s = 1, times 1/2 tokens, times 1/2 sequences
    torch.testing.assert_close(new.grad, torch.tensor([[0.0, 0.0], [0.25, 0.25]]))


# ------------------------------------------------------------------------------------------ GPG / REINFORCE
@pytest.mark.parametrize("name", ["gpg", "reinforce"])
def test_plain_policy_gradient(name):
    old = torch.tensor([[-0.5, -1.0]])
    new = torch.tensor([[-0.5, -1.0]], requires_grad=True)
    adv = torch.tensor([[1.0, -2.0]])
    loss, m = run(name, old, new, adv)
    # -A log pi: -(1)(-0.5) = 0.5, -(-2)(-1) = -2 -> mean -0.75
    assert loss.item() == pytest.approx(-0.75)
    loss.backward()
    torch.testing.assert_close(new.grad, torch.tensor([[-0.5, 1.0]]))  # -A / 2


def test_reinforce_importance_weights_are_constants():
    new = torch.tensor([[-0.5, -1.0]], requires_grad=True)
    weights = torch.tensor([[2.0, 0.5]], requires_grad=True)
    loss, _ = ca.compute_policy_loss_reinforce(
        new.detach(), new, torch.tensor([[1.0, -2.0]]), torch.ones(1, 2), rollout_is_weights=weights
    )
    # 2 * 0.5 + 0.5 * (-2) = 0 -> mean 0
    assert loss.item() == pytest.approx(0.0)
    loss.backward()
    assert weights.grad is None
    torch.testing.assert_close(new.grad, torch.tensor([[-1.0, 0.5]]))  # -w A / 2


# -------------------------------------------------------------------------------------------------- geo_mean
def test_geo_mean_clips_in_log_space():
    old = torch.zeros(2, 2)
    new = torch.tensor([[0.1, 0.5], [0.1, 0.5]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    loss, m = run("geo_mean", old, new, adv, config=actor(clip=0.4))
    # A>0: min(x, clip(x, -0.4, 0.4)) = [0.1, 0.4] -> ratio exp(0.25), loss -exp(0.25)
    # A<0: sign flips: -min(-x, -clip(x)) = max(x, clip(x)) = [0.1, 0.5] -> ratio exp(0.3), loss +exp(0.3)
    assert loss.item() == pytest.approx((-math.exp(0.25) + math.exp(0.3)) / 2, rel=1e-6)
    assert m["actor/pg_clipfrac"] == pytest.approx(1 / 4)  # token 0.5 of the A>0 row
    assert m["actor/pg_clipfrac_lower"] == pytest.approx(1 / 4)  # token 0.5 of the A<0 row


# ----------------------------------------------------------------------------------------------------- CISPO
def test_cispo_clipped_weight_times_log_prob():
    old = torch.tensor([[math.log(0.5 / 1.5)]])  # ratio = 0.5 / (1 / 3) = 1.5
    new = torch.tensor([[math.log(0.5)]], requires_grad=True)
    loss, m = run("cispo", old, new, torch.tensor([[1.0]]), config=actor(clip=0.2))
    # weight clip(1.5, 0.8, 1.2) = 1.2 (no gradient through it): loss -1.2 * 1 * log 0.5
    assert loss.item() == pytest.approx(-1.2 * math.log(0.5), rel=1e-6)
    assert m["actor/pg_clipfrac"] == 1.0
    loss.backward()
    assert new.grad.item() == pytest.approx(-1.2)


# ------------------------------------------------------------------------------------------------------ SAPO
def test_sapo_soft_gate():
    old = torch.zeros(2, 1)
    new = torch.tensor([[0.0], [math.log(1.5)]], requires_grad=True)
    adv = torch.tensor([[1.0], [-1.0]])
    loss, _ = run("sapo", old, new, adv, config=actor())
    # row 0: r = 1, gate sigmoid(0) * 4 / 1 = 2 -> loss -2
    # row 1: r = 1.5, tau 1.05: gate sigmoid(1.05 * 0.5) * 4 / 1.05 -> loss +gate
    gate1 = 1 / (1 + math.exp(-0.525)) * 4 / 1.05
    assert loss.item() == pytest.approx((-2 + gate1) / 2, rel=1e-6)
    loss.backward()
    # at r = 1 the gate's slope is 4 sigma (1 - sigma) = 1, so the gradient is the plain -A (over 2 sequences)
    assert new.grad[0, 0].item() == pytest.approx(-0.5)


def test_sapo_temperatures_from_policy_loss_section():
    old, new, adv = torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([[1.0]])
    loss, _ = run("sapo", old, new, adv, config=actor(policy_loss={"tau_pos": 2.0}))
    assert loss.item() == pytest.approx(-1.0)  # gate at r=1 is 4 / (2 tau) = 2 / tau = 1


# ------------------------------------------------------------------------------------------ Clip-Cov / KL-Cov
def _cov_case():
    # mean A = 0, mean log pi = -2 -> cov = A * (log pi + 2) = [4, 6, 0.5, 0]
    log_prob = torch.tensor([[0.0, -4.0, -1.5, -2.5]], requires_grad=True)
    adv = torch.tensor([[2.0, -3.0, 1.0, 0.0]])
    return log_prob, adv


def test_clip_cov_drops_gradient_of_high_covariance_tokens():
    log_prob, adv = _cov_case()
    cfg = actor(clip=0.2, policy_loss={"clip_cov_ratio": 0.25, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0})
    loss, m = run("clip_cov", log_prob.detach(), log_prob, adv, config=cfg)
    # only token 0 has lb < cov < ub; int(0.25 * 4) = 1 token dropped
    # ratios are 1: losses -A = [-2, 3, -1, 0], token 0 dropped -> (3 - 1 + 0) / 4
    assert loss.item() == pytest.approx(0.5)
    assert m["actor/pg_clipfrac"] == pytest.approx(0.25)
    loss.backward()
    torch.testing.assert_close(log_prob.grad, torch.tensor([[0.0, 0.75, -0.25, 0.0]]))


def test_kl_cov_penalises_top_covariance_tokens():
    log_prob, adv = _cov_case()
    old = log_prob.detach() - torch.tensor([[0.0, 0.2, 0.0, 0.0]])  # log ratio 0.2 on token 1
    cfg = actor(policy_loss={"kl_cov_ratio": 0.25, "ppo_kl_coef": 1.0})
    loss, m = run("kl_cov", old, log_prob, adv, config=cfg)
    # top-1 covariance is token 1 (cov 6): -(-3) * exp(0.2) + 1 * |0.2|; others -A * 1 = -2, -1, 0
    assert loss.item() == pytest.approx((-2 + 3 * math.exp(0.2) + 0.2 - 1 + 0) / 4, rel=1e-5)
    assert m["actor/ppo_kl"] == pytest.approx(0.2 / 4)  # mean |log ratio|
    assert m["actor/pg_clipfrac"] == pytest.approx(0.25)


def test_cov_losses_validate_their_ratio():
    log_prob, adv = _cov_case()
    with pytest.raises(ValueError, match="clip_cov_ratio"):
        run("clip_cov", log_prob.detach(), log_prob, adv, config=actor(policy_loss={"clip_cov_ratio": 0.0}))


def test_unknown_loss_lists_known_names():
    with pytest.raises(ValueError, match="vanilla"):
        ca.get_policy_loss_fn("no_such_loss")
