"""actor.entropy_from_logits_with_chunking and actor.entropy_checkpointing (upstream's keys): the chunked entropy gives
the same numbers, and checkpointing keeps less for backward while the update stays the same."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tests.helpers.tiny_model import tiny_llama
from tests.workers.actor.test_dp_actor import actor_config, training_batch
from verl.utils.torch_functional import entropy_from_logits, entropy_from_logits_with_chunking
from verl.workers.actor import DataParallelPPOActor
from verl.workers.actor.entropy import entropy_function


def test_chunked_entropy_is_the_entropy():
    # uniform over 4 tokens: ln 4; a near one-hot row: ~0; (1, 1, 0, 0) logits: hand-computed
    e = math.e
    p = torch.tensor([e, e, 1.0, 1.0]) / (2 * e + 2)
    by_hand = float(-(p * p.log()).sum())
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [50.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
    for got in (entropy_from_logits(logits), entropy_from_logits_with_chunking(logits, chunk_size=2)):
        assert got.tolist() == pytest.approx([math.log(4), 0.0, by_hand], abs=1e-6)
    many = torch.randn(3, 1000, 17, generator=torch.Generator().manual_seed(0))
    assert torch.equal(entropy_from_logits_with_chunking(many, chunk_size=7), entropy_from_logits(many))
    with pytest.raises(ValueError, match="chunk_size"):
        entropy_from_logits_with_chunking(many, chunk_size=0)


def _saved_bytes(fn, logits: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Bytes autograd keeps for backward while ``fn`` runs, and the gradient of its sum."""
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(logits)
    (grad,) = torch.autograd.grad(out.sum(), logits)
    return sum(saved), grad


def test_entropy_checkpointing_keeps_less_and_gives_the_same_gradient():
    logits = torch.randn(64, 500, generator=torch.Generator().manual_seed(1), requires_grad=True)
    plain_bytes, plain_grad = _saved_bytes(entropy_function(actor_config()), logits)
    kept_bytes, kept_grad = _saved_bytes(entropy_function(actor_config(entropy_checkpointing=True)), logits)
    assert torch.allclose(kept_grad, plain_grad, atol=1e-6)
    # without it the float32 softmax (and the float32 copy) are kept: at least one (64 x 500) float32 tensor more
    assert plain_bytes - kept_bytes >= 64 * 500 * 4, (plain_bytes, kept_bytes)
    chunked = entropy_function(actor_config(entropy_from_logits_with_chunking=True, entropy_checkpointing=True))
    with torch.no_grad():  # nothing to recompute without grad: the plain function runs
        assert torch.equal(chunked(logits), entropy_from_logits(logits))


@pytest.mark.parametrize("keys", [{"entropy_checkpointing": True}, {"entropy_from_logits_with_chunking": True}])
def test_the_actor_update_with_entropy_in_the_loss_is_unchanged(keys):
    model = tiny_llama()
    data = training_batch(model)
    results = []
    for cfg in ({}, keys):
        trained = copy.deepcopy(model)
        actor = DataParallelPPOActor(actor_config(entropy_coeff=0.05, **cfg), trained,
                                     torch.optim.SGD(trained.parameters(), lr=0.5))
        metrics = actor.update_policy(data)
        results.append((dict(trained.named_parameters()), metrics["actor/entropy"]))
    (base, base_entropy), (other, other_entropy) = results
    assert other_entropy == pytest.approx(base_entropy, abs=1e-6)
    assert max((base[k] - other[k]).abs().max().item() for k in base) < 1e-6


def test_the_reference_section_carries_the_same_keys():
    from tests.helpers.typed_config import typed_section
    from verl.workers.config import RefConfig

    ref = typed_section(RefConfig, {"entropy_from_logits_with_chunking": True, "entropy_checkpointing": False})
    model = tiny_llama()
    data = training_batch(model, temperature=1.0)
    data.meta_info.update(micro_batch_size=2)
    policy = DataParallelPPOActor(ref, model)
    assert policy._entropy.func is entropy_from_logits_with_chunking and policy._entropy.keywords == {"chunk_size": 2048}
    _, entropy = policy.compute_log_prob(data, calculate_entropy=True)  # what it computes if asked: the entropy
    _, plain = DataParallelPPOActor(actor_config(), model).compute_log_prob(data, calculate_entropy=True)
    mask = data.batch["response_mask"]  # the packed path (the section's default) leaves zeros past a response's end
    assert torch.allclose(entropy * mask, plain * mask, atol=1e-5)


def test_the_chunk_size_is_the_rows_per_chunk(monkeypatch):
    """actor.entropy_from_logits_chunk_size (upstream after v0.7): the chunked entropy's rows per chunk."""
    from types import SimpleNamespace

    import verl.workers.actor.entropy as entropy_module

    seen = []

    def spy(logits, chunk_size):
        seen.append(chunk_size)
        return entropy_from_logits_with_chunking(logits, chunk_size=chunk_size)

    monkeypatch.setattr(entropy_module, "entropy_from_logits_with_chunking", spy)
    logits = torch.randn(2, 5, 11, generator=torch.Generator().manual_seed(1))
    config = SimpleNamespace(entropy_from_logits_with_chunking=True, entropy_from_logits_chunk_size=3,
                             entropy_checkpointing=False)
    assert torch.equal(entropy_function(config)(logits), entropy_from_logits(logits)) and seen == [3]
    config.entropy_from_logits_with_chunking = False  # the size only matters with the chunked function
    entropy_function(config)(logits)
    assert seen == [3]
