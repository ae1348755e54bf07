"""actor.use_prefix_grouper on one CUDA device: the grouped forward (sdpa with its block mask) gives the padded path's
log-probs and entropies, fp32 to rounding and bf16 within bf16's noise, and one update moves the weights the same
way. The CPU twin is tests/workers/actor/test_prefix_grouper.py.

Marked ``gpu``: skipped with the reason where CUDA is absent (tests/conftest.py)."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.workers.actor.test_dp_actor import actor_config, max_param_diff
from tests.workers.actor.test_prefix_grouper import _meta, _update, grouped_batch, tiny_qwen, training_batch
from verl.models.prefix_grouper import PREFIX_GROUPER_IMPL_PREFIX
from verl.workers.actor import DataParallelPPOActor

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


def _log_probs(model, grouped: bool, data):
    return DataParallelPPOActor(actor_config(use_prefix_grouper=grouped), model).compute_log_prob(
        data, calculate_entropy=True)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-4), (torch.bfloat16, 0.05)])
@pytest.mark.parametrize("kind", ["qwen2", "qwen3"])
def test_grouped_log_probs_equal_padded_on_cuda(kind, dtype, tol):
    model = tiny_qwen(kind).to("cuda", dtype)
    data = _meta(grouped_batch(), micro_batch_size=3)  # groups split across micro-batches too
    want, want_entropy = _log_probs(copy.deepcopy(model), False, data)
    got, got_entropy = _log_probs(model, True, data)
    assert model.config._attn_implementation == PREFIX_GROUPER_IMPL_PREFIX + "sdpa"
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(got[mask].float(), want[mask].float(), rtol=tol, atol=tol)
    torch.testing.assert_close(got_entropy[mask].float(), want_entropy[mask].float(), rtol=tol, atol=tol)


def test_one_grouped_update_equals_the_padded_update_on_cuda():
    model = tiny_qwen("qwen3", seed=3).cuda()
    data = training_batch(model)
    cfg = {"ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 3, "entropy_coeff": 0.01, "use_kl_loss": True}
    padded, _ = _update(model, copy.deepcopy(data), **cfg)
    grouped, _ = _update(model, copy.deepcopy(data), use_prefix_grouper=True, **cfg)
    assert max_param_diff(padded, dict(model.named_parameters())) > 1e-3  # the step really moved the weights
    assert max_param_diff(padded, grouped) < 1e-4
