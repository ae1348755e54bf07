"""use_remove_padding in the actor and the critic: the same log-probs, entropies, values and updates as the padded
path; with dynamic batch sizes, gradient checkpointing, a peft (LoRA) model, and a module without logits_to_keep."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.tiny_model import rollout_batch, tiny_llama
from tests.workers.actor.test_dp_actor import actor_config, manual_log_probs, max_param_diff, training_batch
from tests.workers.critic.test_dp_critic import critic_config, tiny_critic
from verl.models.varlen_attention import VARLEN_PREFIX
from verl.workers.actor import DataParallelPPOActor
from verl.workers.critic import DataParallelPPOCritic

# long and short prompts and responses, including a one-token response and a full-length one
PROMPTS = [6, 2, 5, 1, 4, 6]
RESPONSES = [5, 1, 3, 5, 2, 4]


def _batch(**meta):
    return rollout_batch(PROMPTS, RESPONSES, meta_info={"temperature": 0.7, "micro_batch_size": 4, **meta})


def _log_probs(model, rmpad, data, **cfg):
    actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad, **cfg), model)
    return actor.compute_log_prob(data, calculate_entropy=True)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("meta", [{}, {"use_dynamic_bsz": True, "max_token_len": 14}])
def test_log_probs_and_entropy_match_padded(attn, meta):
    model = tiny_llama(seed=2)
    model.config._attn_implementation = attn
    data = _batch(**meta)
    with torch.no_grad():
        expected, expected_entropy = manual_log_probs(model, data, 0.7)
    padded = _log_probs(copy.deepcopy(model), False, data)
    packed = _log_probs(model, True, data)
    assert model.config._attn_implementation == VARLEN_PREFIX + attn  # the packed path really ran
    mask = data.batch["response_mask"].bool()
    for got, want in ((packed[0], expected), (packed[1], expected_entropy), (padded[0], expected)):
        torch.testing.assert_close(got[mask], want[mask], rtol=1e-5, atol=1e-5)
    assert (packed[0][~mask] == 0).all() and (packed[1][~mask] == 0).all()


def _update(model, data, lr=0.5, **cfg):
    model = copy.deepcopy(model)
    actor = DataParallelPPOActor(actor_config(**cfg), model, torch.optim.SGD(model.parameters(), lr=lr))
    metrics = actor.update_policy(data)
    return dict(model.named_parameters()), metrics


@pytest.mark.parametrize("cfg", [{}, {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 11},
                                 {"ppo_micro_batch_size_per_gpu": 1, "loss_agg_mode": "seq-mean-token-mean"}])
def test_update_matches_padded(cfg):
    model = tiny_llama()
    data = training_batch(model)
    extra = {"entropy_coeff": 0.01, "use_kl_loss": True}
    padded, padded_metrics = _update(model, data, **extra, **cfg)
    packed, packed_metrics = _update(model, data, use_remove_padding=True, **extra, **cfg)
    assert max_param_diff(padded, dict(model.named_parameters())) > 1e-3  # the step really moved the weights
    assert max_param_diff(padded, packed) < 1e-5
    for key in ("actor/pg_loss", "actor/entropy", "actor/kl_loss", "actor/grad_norm"):
        assert packed_metrics[key] == pytest.approx(padded_metrics[key], rel=1e-4, abs=1e-6), key


def test_gradient_checkpointing_gives_the_same_update():
    model = tiny_llama()
    data = training_batch(model)
    plain, _ = _update(model, data)
    checkpointed = copy.deepcopy(model)
    checkpointed.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for rmpad in (False, True):
        after, _ = _update(checkpointed, data, use_remove_padding=rmpad)
        assert max_param_diff(plain, after) < 1e-5, rmpad


class _HidesLogitsToKeep(torch.nn.Module):
    """An HF model behind a forward without logits_to_keep: the actor must slice the logits itself."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, **kwargs):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs)


def test_module_without_logits_to_keep():
    model = tiny_llama(seed=4)
    data = _batch()
    expected, _ = _log_probs(copy.deepcopy(model), False, data)
    got, _ = _log_probs(_HidesLogitsToKeep(model), True, data)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(got[mask], expected[mask], rtol=1e-5, atol=1e-5)


def test_peft_model_matches_padded():
    peft = pytest.importorskip("peft")
    base = tiny_llama(seed=5)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      init_lora_weights=False))
    data = training_batch(base)
    mask = data.batch["response_mask"].bool()
    padded = _log_probs(copy.deepcopy(model), False, data)[0]
    packed = _log_probs(model, True, data)[0]
    torch.testing.assert_close(packed[mask], padded[mask], rtol=1e-5, atol=1e-5)
    # LoRA grads agree too (only the adapters train)
    padded_params, _ = _update(model, data)
    packed_params, _ = _update(model, data, use_remove_padding=True)
    lora = {k: v for k, v in packed_params.items() if "lora_" in k}
    assert lora and max((lora[k] - padded_params[k]).abs().max().item() for k in lora) < 1e-5


def test_rollout_on_a_varlen_model_is_unchanged():
    """The hybrid engine generates with the actor's module: switching it to varlen attention changes nothing."""
    from tests.workers.actor.test_fsdp2_two_ranks import _prompts, _rollout_config
    from verl.workers.rollout import HFRollout

    model = tiny_llama(seed=6)
    before = HFRollout(model, _rollout_config()).generate_sequences(_prompts(0, 2)).batch["responses"]
    DataParallelPPOActor(actor_config(use_remove_padding=True), model)
    after = HFRollout(model, _rollout_config()).generate_sequences(_prompts(0, 2)).batch["responses"]
    assert torch.equal(before, after)


def _critic_update(model, data, **cfg):
    model = copy.deepcopy(model)
    critic = DataParallelPPOCritic(critic_config(**cfg), model, torch.optim.SGD(model.parameters(), lr=0.5))
    critic.update_critic(data)
    return dict(model.named_parameters())


@pytest.mark.parametrize("cfg", [{}, {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 11,
                                      "forward_max_token_len_per_gpu": 11}])
def test_critic_values_and_update_match_padded(cfg):
    model = tiny_critic()
    data = rollout_batch(PROMPTS, RESPONSES)
    padded = DataParallelPPOCritic(critic_config(**cfg), copy.deepcopy(model)).compute_values(data)
    critic = DataParallelPPOCritic(critic_config(**{"model.use_remove_padding": True}, **cfg), model)
    assert critic.use_remove_padding
    packed = critic.compute_values(data)
    torch.testing.assert_close(packed, padded, rtol=1e-5, atol=1e-6)  # both zero on response padding
    gen = torch.Generator().manual_seed(3)
    data.batch["values"] = padded
    data.batch["returns"] = torch.randn(padded.shape, generator=gen) * data.batch["response_mask"]
    before = dict(model.named_parameters())
    plain = _critic_update(model, data, **cfg)
    rmpad = _critic_update(model, data, **{"model.use_remove_padding": True}, **cfg)
    assert max_param_diff(plain, before) > 1e-4
    assert max_param_diff(plain, rmpad) < 1e-5


def _fsdp_worker(rank: int, port: int, results) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        plain = tiny_llama()
        shard = training_batch(plain)[rank * 2 : (rank + 1) * 2]
        # rank 0's rows hold 11 + 4 real tokens, rank 1's 8 + 4: a budget of 12 gives 2 vs 1 micro-batches locally
        cfg = {"ppo_mini_batch_size": 2, "use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 12}
        out = {}
        for rmpad in (False, True):
            model = copy.deepcopy(plain)
            for layer in model.model.layers:
                fully_shard(layer)
            fully_shard(model)
            actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad, **cfg), model,
                                         torch.optim.SGD(model.parameters(), lr=0.5))
            log_probs, entropy = actor.compute_log_prob(shard, calculate_entropy=True)
            actor.update_policy(shard)
            out[rmpad] = (log_probs, entropy, {k: v.full_tensor() for k, v in model.state_dict().items()})
        mask = shard.batch["response_mask"].bool()
        results[rank] = {
            "log_probs": (out[True][0] - out[False][0])[mask].abs().max().item(),
            "entropy": (out[True][1] - out[False][1])[mask].abs().max().item(),
            "params": max((out[True][2][k] - out[False][2][k]).abs().max().item() for k in out[True][2]),
            "moved": max((out[True][2][k] - plain.state_dict()[k]).abs().max().item() for k in out[True][2]),
        }
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_remove_padding_under_fsdp2_on_two_ranks():
    from tests.helpers.ranks import free_port, run_ranks

    results = run_ranks(_fsdp_worker, free_port(), nprocs=2, timeout_s=100)
    for rank in range(2):
        r = results[rank]
        assert r["log_probs"] < 1e-5 and r["entropy"] < 1e-5 and r["params"] < 1e-5, (rank, r)
        assert r["moved"] > 1e-3, (rank, r)
