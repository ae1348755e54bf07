"""actor.use_torch_compile / ref.use_torch_compile (upstream's keys): the entropy function goes through torch.compile
and gives the eager entropies and gradients up to float32 rounding; the update with the entropy in the loss is the
eager one. Compiling takes seconds on a CPU, so the compiled function is shared by the tests of this file."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.tiny_model import tiny_llama
from tests.helpers.typed_config import typed_section
from tests.workers.actor.test_dp_actor import actor_config, training_batch
from verl.utils.torch_functional import entropy_from_logits
from verl.workers.actor import DataParallelPPOActor
from verl.workers.actor.entropy import entropy_function

pytestmark = pytest.mark.timeout(600)  # inductor compiles C++ on the first calls: tens of seconds on 2 loaded cores


def _compiled(fn) -> bool:
    return hasattr(fn, "_torchdynamo_orig_callable")  # what torch.compile returns for a function


def test_compiled_entropy_is_the_eager_entropy_and_gradient():
    from torch._dynamo.utils import counters

    compiled = entropy_function(actor_config(use_torch_compile=True))
    assert _compiled(compiled) and not _compiled(entropy_function(actor_config()))
    frames = counters["frames"]["ok"]
    gen = torch.Generator().manual_seed(0)
    for shape in ((3, 17, 128), (5, 33, 128), (40, 1000)):  # dynamic shapes: no recompile per length
        logits = (3 * torch.randn(*shape, generator=gen)).requires_grad_()
        got = compiled(logits)
        want = entropy_from_logits(logits)
        assert got.dtype == torch.float32 and got.shape == want.shape
        assert torch.allclose(got, want, rtol=0, atol=1e-5), (shape, (got - want).abs().max().item())
        (g_got,) = torch.autograd.grad(got.sum(), logits)
        (g_want,) = torch.autograd.grad(want.sum(), logits)
        assert torch.allclose(g_got, g_want, rtol=0, atol=1e-6), shape
    assert counters["frames"]["ok"] > frames  # dynamo really compiled it (not a silent eager fallback)
    half = torch.randn(4, 7, 128, generator=gen).bfloat16()
    assert torch.allclose(compiled(half), entropy_from_logits(half), atol=1e-5)


def test_the_actor_update_with_a_compiled_entropy_is_the_eager_one():
    model = tiny_llama()
    data = training_batch(model)
    results = []
    for compile_ in (False, True):
        trained = copy.deepcopy(model)
        actor = DataParallelPPOActor(actor_config(entropy_coeff=0.05, use_torch_compile=compile_), trained,
                                     torch.optim.SGD(trained.parameters(), lr=0.5))
        assert _compiled(actor._entropy) == compile_
        _, entropy = actor.compute_log_prob(data, calculate_entropy=True)
        metrics = actor.update_policy(data)
        results.append((entropy, dict(trained.named_parameters()), metrics["actor/entropy"]))
    (base_h, base, base_metric), (h, other, metric) = results
    assert torch.allclose(h, base_h, atol=1e-5)
    assert metric == pytest.approx(base_metric, abs=1e-5)
    assert max((base[k] - other[k]).abs().max().item() for k in base) < 1e-5


def test_the_reference_section_follows_the_actors_key():
    from verl.trainer.config import load_config, validate_config
    from verl.workers.config import RefConfig

    arr = validate_config(load_config(["actor_rollout_ref.actor.use_torch_compile=true"]), check_files=False) \
        .actor_rollout_ref
    assert arr.actor.use_torch_compile and arr.ref.use_torch_compile  # the yaml's ${...actor.use_torch_compile}
    ref = typed_section(RefConfig, {"use_torch_compile": True})
    assert _compiled(DataParallelPPOActor(ref, tiny_llama())._entropy)
    assert not _compiled(DataParallelPPOActor(typed_section(RefConfig, {}), tiny_llama())._entropy)
