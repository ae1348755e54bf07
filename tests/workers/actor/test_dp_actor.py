import copy
import math

import pytest
import torch

from tests.helpers.tiny_model import rollout_batch, tiny_llama
from tests.helpers.typed_config import typed_section
from verl.trainer.config import FSDPActorConfig
from verl.workers.actor import DataParallelPPOActor, NonFiniteLossError

PROMPT_LENGTHS = [6, 3, 5, 2]
RESPONSE_LENGTHS = [5, 1, 3, 2]  # very different token counts, so token-mean weighting matters


def actor_config(**overrides) -> FSDPActorConfig:
    return typed_section(FSDPActorConfig, {
        "ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2, "use_dynamic_bsz": False,
        "ppo_max_token_len_per_gpu": 64, "ppo_epochs": 1, "shuffle": False, "grad_clip": 1e6,
        "clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0,
        "loss_agg_mode": "token-mean", "entropy_coeff": 0.0, "use_kl_loss": False, "kl_loss_coef": 0.1,
        "kl_loss_type": "low_var_kl", "policy_loss.loss_mode": "vanilla",
        "use_remove_padding": False,  # the padded path is the reference the packed one is compared against
    }, **overrides)


def manual_log_probs(model, data, temperature):
    b = data.batch
    logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                   position_ids=b["position_ids"]).logits
    prompt_len = b["prompts"].size(1)
    logits = logits[:, prompt_len - 1 : -1] / temperature
    logp = torch.log_softmax(logits, dim=-1)
    picked = logp.gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return picked, entropy


def training_batch(model, seed=0, **meta):
    data = rollout_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, seed=seed, meta_info=meta)
    actor = DataParallelPPOActor(actor_config(), model)
    old, _ = actor.compute_log_prob(data)
    gen = torch.Generator().manual_seed(seed + 7)
    data.batch["old_log_probs"] = old + 0.05 * torch.randn(old.shape, generator=gen)  # some ratios get clipped
    data.batch["advantages"] = torch.randn(old.shape, generator=gen) * data.batch["response_mask"]
    data.batch["ref_log_prob"] = old.clone()
    return data


def updated_params(model, data, lr=0.5, **cfg):
    model = copy.deepcopy(model)
    actor = DataParallelPPOActor(actor_config(**cfg), model, torch.optim.SGD(model.parameters(), lr=lr))
    metrics = actor.update_policy(data)
    return dict(model.named_parameters()), metrics


def max_param_diff(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_compute_log_prob_matches_manual_forward():
    model = tiny_llama()
    data = rollout_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, meta_info={"temperature": 0.7, "micro_batch_size": 3})
    log_probs, entropys = DataParallelPPOActor(actor_config(), model).compute_log_prob(data, calculate_entropy=True)
    with torch.no_grad():
        expected, expected_entropy = manual_log_probs(model, data, 0.7)
    assert log_probs.shape == (4, 5) and entropys.shape == (4, 5)
    assert torch.allclose(log_probs, expected, atol=1e-5)
    assert torch.allclose(entropys, expected_entropy, atol=1e-5)
    assert not log_probs.requires_grad


def test_compute_log_prob_without_entropy_returns_none():
    data = rollout_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS)
    _, entropys = DataParallelPPOActor(actor_config(), tiny_llama()).compute_log_prob(data)
    assert entropys is None


@pytest.mark.parametrize("meta", [{"micro_batch_size": 1}, {"micro_batch_size": 4},
                                  {"use_dynamic_bsz": True, "max_token_len": 12}])
def test_log_probs_independent_of_micro_batching(meta):
    model = tiny_llama()
    actor = DataParallelPPOActor(actor_config(), model)
    reference, _ = actor.compute_log_prob(rollout_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS))
    got, _ = actor.compute_log_prob(rollout_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, meta_info=meta))
    assert torch.allclose(got, reference, atol=1e-5)


def test_compute_log_prob_missing_meta_names_key():
    data = rollout_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS)
    del data.meta_info["temperature"]
    with pytest.raises(KeyError, match="temperature"):
        DataParallelPPOActor(actor_config(), tiny_llama()).compute_log_prob(data)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_micro_batch_size_does_not_change_update(mode):
    model = tiny_llama()
    data = training_batch(model)
    whole, _ = updated_params(model, data, ppo_micro_batch_size_per_gpu=4, loss_agg_mode=mode)
    single, _ = updated_params(model, data, ppo_micro_batch_size_per_gpu=1, loss_agg_mode=mode)
    dynamic, _ = updated_params(model, data, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=11, loss_agg_mode=mode)
    assert max_param_diff(whole, dict(model.named_parameters())) > 1e-3  # the update really moved the weights
    assert max_param_diff(whole, single) < 1e-5
    assert max_param_diff(whole, dynamic) < 1e-5


def test_row_weighting_would_differ():
    """Guards the test above: with these response lengths, weighting micro-batches by rows (not tokens)
    gives a different token-mean gradient, so equality there is evidence of token weighting."""
    model = tiny_llama()
    data = training_batch(model)
    whole, _ = updated_params(model, data, ppo_micro_batch_size_per_gpu=4)
    seq_mode, _ = updated_params(model, data, ppo_micro_batch_size_per_gpu=4, loss_agg_mode="seq-mean-token-mean")
    assert max_param_diff(whole, seq_mode) > 1e-4


def test_zero_advantages_leave_weights_unchanged():
    model = tiny_llama()
    data = training_batch(model)
    data.batch["advantages"] = torch.zeros_like(data.batch["advantages"])
    after, metrics = updated_params(model, data, lr=1.0)
    assert max_param_diff(after, dict(model.named_parameters())) == 0.0
    assert metrics["actor/grad_norm"] == [0.0]


def test_positive_advantage_raises_that_tokens_log_prob():
    model = tiny_llama()
    data = training_batch(model)
    data.batch["old_log_probs"] = DataParallelPPOActor(actor_config(), model).compute_log_prob(data)[0]
    data.batch["advantages"] = data.batch["response_mask"].float()  # reward every response token
    before = data.batch["old_log_probs"]
    trained = copy.deepcopy(model)
    DataParallelPPOActor(actor_config(), trained, torch.optim.SGD(trained.parameters(), lr=0.5)).update_policy(data)
    after, _ = DataParallelPPOActor(actor_config(), trained).compute_log_prob(data)
    mask = data.batch["response_mask"].bool()
    assert (after[mask] - before[mask]).mean() > 0


def test_metrics_names_and_counts():
    model = tiny_llama()
    data = training_batch(model)
    _, metrics = updated_params(model, data, entropy_coeff=0.01, use_kl_loss=True, ppo_epochs=2, shuffle=True,
                                ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1)
    for name in ["actor/pg_loss", "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower",
                 "actor/kl_loss", "actor/kl_coef", "actor/grad_norm"]:
        assert name in metrics, name
    assert len(metrics["actor/grad_norm"]) == 4  # 2 epochs x 2 mini-batches
    assert len(metrics["actor/pg_loss"]) == 8  # x 2 micro-batches
    assert metrics["actor/kl_coef"][0] == 0.1
    # ref_log_prob equals the first forward's log-probs: KL of the very first micro-batch is 0
    assert metrics["actor/kl_loss"][0] == pytest.approx(0.0, abs=1e-6)


def test_nan_loss_stops_with_the_micro_batch():
    model = tiny_llama()
    data = training_batch(model)
    data.batch["advantages"][2, 0] = float("nan")  # row 2 = micro-batch 1 of mini-batch 0 (micro size 2)
    trained = copy.deepcopy(model)
    optimizer = torch.optim.SGD(trained.parameters(), lr=0.5)
    actor = DataParallelPPOActor(actor_config(), trained, optimizer)
    with pytest.raises(NonFiniteLossError, match="mini-batch 0, micro-batch 1"):
        actor.update_policy(data)
    assert max_param_diff(dict(trained.named_parameters()), dict(model.named_parameters())) == 0.0
    assert all(p.grad is None or not p.grad.any() for p in trained.parameters())


def test_nonfinite_grad_norm_skips_step_and_is_recorded():
    model = tiny_llama()
    data = training_batch(model)
    trained = copy.deepcopy(model)
    trained.model.norm.weight.register_hook(lambda g: torch.full_like(g, float("inf")))
    actor = DataParallelPPOActor(actor_config(), trained, torch.optim.SGD(trained.parameters(), lr=0.5))
    metrics = actor.update_policy(data)
    assert math.isinf(metrics["actor/grad_norm"][0]) and metrics["actor/grad_norm_nonfinite"] == [1.0]
    assert max_param_diff(dict(trained.named_parameters()), dict(model.named_parameters())) == 0.0


def test_update_without_optimizer_is_an_error():
    model = tiny_llama()
    with pytest.raises(RuntimeError, match="optimizer"):
        DataParallelPPOActor(actor_config(), model).update_policy(training_batch(model))
