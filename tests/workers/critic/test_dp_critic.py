import copy

import pytest
import torch

from tests.helpers.tiny_model import PROMPT_LEN_DEFAULT, rollout_batch, tiny_llama, tiny_llama_config
from tests.helpers.typed_config import typed_section
from verl.models.value_head import build_value_model, load_value_model
from verl.trainer.config import FSDPCriticConfig
from verl.workers.critic import DataParallelPPOCritic
from verl.workers.micro_batching import NonFiniteLossError

PROMPT_LENGTHS = [6, 3, 5, 2]
RESPONSE_LENGTHS = [5, 1, 3, 2]


def critic_config(**overrides) -> FSDPCriticConfig:
    return typed_section(FSDPCriticConfig, {
        "ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 2, "forward_micro_batch_size_per_gpu": 2,
        "use_dynamic_bsz": False, "ppo_max_token_len_per_gpu": 64, "forward_max_token_len_per_gpu": 64,
        "ppo_epochs": 1, "shuffle": False, "grad_clip": 1.0, "cliprange_value": 0.5, "loss_agg_mode": "token-mean",
        "model.use_remove_padding": False,  # the padded path is the reference the packed one is compared against
    }, **overrides)


def tiny_critic(seed=0, score_init_std=0.02):
    torch.manual_seed(seed)
    return build_value_model(tiny_llama_config(), score_init_std=score_init_std).float()


def value_batch(meta=None):
    data = rollout_batch(PROMPT_LENGTHS, RESPONSE_LENGTHS, meta_info=meta)
    data.meta_info.pop("micro_batch_size")  # compute_values falls back to the critic config
    data.meta_info.pop("use_dynamic_bsz")
    data.meta_info.pop("max_token_len")
    data.meta_info.update(meta or {})
    return data


def test_compute_values_positions_and_mask():
    model = tiny_critic()
    data = value_batch()
    values = DataParallelPPOCritic(critic_config(), model).compute_values(data)
    b = data.batch
    with torch.no_grad():
        per_token = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                          position_ids=b["position_ids"]).logits[..., 0]
    # value of response token t is read at position P-1+t (the state before it)
    expected = per_token[:, PROMPT_LEN_DEFAULT - 1 : -1] * b["response_mask"]
    assert values.shape == (4, 5)
    assert torch.allclose(values, expected, atol=1e-6)
    assert (values[b["response_mask"] == 0] == 0).all()
    assert (values[b["response_mask"] == 1] != 0).all()


@pytest.mark.parametrize("meta", [{"micro_batch_size": 1}, {"use_dynamic_bsz": True, "max_token_len": 11}])
def test_values_independent_of_micro_batching(meta):
    critic = DataParallelPPOCritic(critic_config(), tiny_critic())
    reference = critic.compute_values(value_batch())
    assert torch.allclose(critic.compute_values(value_batch(meta)), reference, atol=1e-6)


def _training_data(model):
    data = value_batch()
    data.batch["values"] = DataParallelPPOCritic(critic_config(), model).compute_values(data)
    gen = torch.Generator().manual_seed(3)
    data.batch["returns"] = (data.batch["values"] + 0.3 * torch.randn(4, 5, generator=gen)) * data.batch["response_mask"]
    return data


def _mse(values, data):
    mask = data.batch["response_mask"].float()
    return (((values - data.batch["returns"]) ** 2) * mask).sum() / mask.sum()


def test_update_reduces_value_error_and_reports_metrics():
    model = tiny_critic()
    data = _training_data(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    critic = DataParallelPPOCritic(critic_config(ppo_epochs=5), model, optimizer)
    before = _mse(data.batch["values"], data)
    metrics = critic.update_critic(data)
    after = _mse(critic.compute_values(data), data)
    assert after < 0.5 * before
    # the update loop shared with the actor records the same per-step metrics for both roles
    assert set(metrics) == {"critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm",
                            "critic/grad_norm_nonfinite"}
    assert len(metrics["critic/grad_norm"]) == 5 and len(metrics["critic/vf_loss"]) == 10
    assert metrics["critic/grad_norm_nonfinite"] == [0.0] * 5
    # first micro-batch, before any step: vpreds == old values, so the loss is 0.5 * its token-mean squared error
    first = data[:2]
    assert metrics["critic/vf_loss"][0] == pytest.approx(0.5 * _mse(first.batch["values"], first).item(), rel=1e-4)
    assert metrics["critic/vf_clipfrac"][0] == 0.0


def test_micro_batch_size_does_not_change_critic_update():
    model = tiny_critic()
    data = _training_data(model)
    results = []
    for cfg in [dict(ppo_micro_batch_size_per_gpu=4), dict(ppo_micro_batch_size_per_gpu=1),
                dict(use_dynamic_bsz=True, ppo_max_token_len_per_gpu=11)]:
        trained = copy.deepcopy(model)
        critic = DataParallelPPOCritic(critic_config(grad_clip=1e6, **cfg), trained,
                                       torch.optim.SGD(trained.parameters(), lr=0.5))
        critic.update_critic(data)
        results.append(dict(trained.named_parameters()))
    for other in results[1:]:
        assert max((results[0][k] - other[k]).abs().max().item() for k in other) < 1e-5


def test_nan_returns_stop_the_update():
    model = tiny_critic()
    data = _training_data(model)
    data.batch["returns"][0, 0] = float("nan")
    critic = DataParallelPPOCritic(critic_config(), model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(NonFiniteLossError, match="critic loss is not finite at epoch 0, mini-batch 0, micro-batch 0"):
        critic.update_critic(data)


def test_value_head_init_small_and_dropout_off():
    model = tiny_critic(score_init_std=1e-3)
    assert model.score.weight.shape == (1, 32)
    assert model.score.weight.abs().max() < 1e-2 and model.score.bias.abs().max() == 0
    assert model.dropout.p == 0.0


def test_load_value_model_from_causal_lm_folder(tmp_path):
    actor = tiny_llama(seed=5)
    actor.save_pretrained(tmp_path / "actor")
    critic = load_value_model(tmp_path / "actor", score_init_std=1e-3)
    # the trunk is the actor's; only the head is new (and small)
    assert torch.equal(critic.model.layers[0].mlp.up_proj.weight, actor.model.layers[0].mlp.up_proj.weight)
    assert critic.score.weight.abs().max() < 1e-2
    # a saved critic keeps its trained head
    with torch.no_grad():
        critic.score.weight.fill_(0.5)
    critic.save_pretrained(tmp_path / "critic")
    reloaded = load_value_model(tmp_path / "critic")
    assert torch.equal(reloaded.score.weight, torch.full((1, 32), 0.5))


def test_loss_scale_factor_divides_the_value_loss():
    """critic.loss_scale_factor (upstream after v0.7; follows the actor's): seq-mean-token-sum-norm's divisor."""
    model = tiny_critic()
    data = _training_data(model)
    first = {}
    for factor in (None, 10.0):
        trained = copy.deepcopy(model)
        config = critic_config(loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=factor)
        critic = DataParallelPPOCritic(config, trained, torch.optim.SGD(trained.parameters(), lr=0.0))
        first[factor] = critic.update_critic(data)["critic/vf_loss"][0]
    # the first micro-batch (rows 0, 1; 5 padded response positions): null divides by 5, the factor by 10
    assert first[10.0] == pytest.approx(first[None] * 5 / 10, rel=1e-5)
    from tests.trainer.config.overrides_helpers import refusal_of

    refusal = refusal_of("algorithm.adv_estimator=gae", "critic.loss_scale_factor=2")
    assert "critic.loss_scale_factor=2.0 divides the value loss only with critic.loss_agg_mode=" in refusal
