"""fsdp_config.pad_to_length / pad_to_length_bucket (upstream after v0.7): the actor's and the critic's packed
micro-batches reach the model padded up to a multiple of the bucket, and every log-prob, entropy, value and update is
the one of the unpadded packing."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.tiny_model import rollout_batch, tiny_llama
from tests.helpers.tiny_moe import tiny_qwen3_moe
from tests.workers.actor.test_dp_actor import actor_config, max_param_diff, training_batch
from tests.workers.critic.test_dp_critic import critic_config, tiny_critic
from verl.workers.actor import DataParallelPPOActor
from verl.workers.critic import DataParallelPPOCritic

PROMPTS = [6, 2, 5, 1, 4, 6]
RESPONSES = [5, 1, 3, 5, 2, 4]
BUCKET = 16
PADDED = {"fsdp_config.pad_to_length": True, "fsdp_config.pad_to_length_bucket": BUCKET}


def _lengths_seen(model) -> list[int]:
    """The sequence length of every forward through ``model``'s embedding."""
    seen: list[int] = []
    model.get_input_embeddings().register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[-1]))
    return seen


def test_actor_log_probs_and_entropy_are_the_unpadded_ones():
    model = tiny_llama(seed=2)
    data = rollout_batch(PROMPTS, RESPONSES, meta_info={"temperature": 0.7, "micro_batch_size": 4})
    plain_model = copy.deepcopy(model)
    plain_seen, padded_seen = _lengths_seen(plain_model), _lengths_seen(model)
    plain = DataParallelPPOActor(actor_config(use_remove_padding=True), plain_model)
    padded = DataParallelPPOActor(actor_config(use_remove_padding=True, **PADDED), model)
    want, want_entropy = plain.compute_log_prob(data, calculate_entropy=True)
    got, entropy = padded.compute_log_prob(data, calculate_entropy=True)
    assert any(n % BUCKET for n in plain_seen)  # unpadded packing: lengths vary with the micro-batch
    assert padded_seen and all(n % BUCKET == 0 for n in padded_seen), padded_seen
    assert [-(-n // BUCKET) * BUCKET for n in plain_seen] == padded_seen  # the next multiple, not more
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(entropy, want_entropy, rtol=1e-5, atol=1e-6)


def test_actor_update_is_the_unpadded_one():
    model = tiny_llama()
    data = training_batch(model)
    extra = {"use_remove_padding": True, "entropy_coeff": 0.01, "use_kl_loss": True}
    after = {}
    for name, cfg in (("plain", {}), ("padded", PADDED)):
        copy_ = copy.deepcopy(model)
        seen = _lengths_seen(copy_)
        actor = DataParallelPPOActor(actor_config(**extra, **cfg), copy_, torch.optim.SGD(copy_.parameters(), lr=0.5))
        metrics = actor.update_policy(data)
        after[name] = (dict(copy_.named_parameters()), metrics, seen)
    assert all(n % BUCKET == 0 for n in after["padded"][2])
    assert max_param_diff(after["plain"][0], dict(model.named_parameters())) > 1e-3  # the step moved the weights
    assert max_param_diff(after["plain"][0], after["padded"][0]) < 1e-5
    for key in ("actor/pg_loss", "actor/entropy", "actor/kl_loss", "actor/grad_norm"):
        assert after["padded"][1][key] == pytest.approx(after["plain"][1][key], rel=1e-4, abs=1e-6), key


def test_critic_values_and_update_are_the_unpadded_ones():
    model = tiny_critic()
    data = rollout_batch(PROMPTS, RESPONSES)
    packed = {"model.use_remove_padding": True}
    bucket = {"model.fsdp_config.pad_to_length": True, "model.fsdp_config.pad_to_length_bucket": BUCKET}
    plain_model = copy.deepcopy(model)
    seen = _lengths_seen(model)
    want = DataParallelPPOCritic(critic_config(**packed), plain_model).compute_values(data)
    got = DataParallelPPOCritic(critic_config(**packed, **bucket), model).compute_values(data)
    assert seen and all(n % BUCKET == 0 for n in seen), seen
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    data.batch["values"] = want
    data.batch["returns"] = torch.randn(want.shape, generator=torch.Generator().manual_seed(3)) * data.batch[
        "response_mask"]
    updated = {}
    for name, cfg in (("plain", packed), ("padded", {**packed, **bucket})):
        copy_ = copy.deepcopy(plain_model)
        DataParallelPPOCritic(critic_config(**cfg), copy_, torch.optim.SGD(copy_.parameters(), lr=0.5)).update_critic(
            data)
        updated[name] = dict(copy_.named_parameters())
    assert max_param_diff(updated["plain"], dict(plain_model.named_parameters())) > 1e-4
    assert max_param_diff(updated["plain"], updated["padded"]) < 1e-5


def test_router_replay_with_pad_to_length_is_refused_at_build():
    with pytest.raises(ValueError, match="pad_to_length does not combine with router_replay"):
        DataParallelPPOActor(actor_config(use_remove_padding=True, **{"router_replay.mode": "R2"}, **PADDED),
                             tiny_qwen3_moe())
