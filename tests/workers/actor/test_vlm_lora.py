"""LoRA on a tiny Qwen2.5-VL actor (upstream's geo3k LoRA recipe: target_modules=all-linear,
exclude_modules='.*visual.*'): a fresh adapter leaves the log-probs with images as the base model's, an update
trains only adapter matrices, none of them in the vision tower, and the trained adapter changes the log-probs."""

from __future__ import annotations

import copy

import torch

from tests.helpers.tiny_vlm import tiny_vlm
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.actor.test_vlm_actor import vlm_batch
from verl.models.lora import add_lora
from verl.workers.actor import DataParallelPPOActor


def test_lora_on_the_language_model_of_a_vlm(tmp_path):
    data = vlm_batch(tmp_path, "qwen2_5_vl")
    base = tiny_vlm("qwen2_5_vl")
    expected, _ = DataParallelPPOActor(actor_config(), copy.deepcopy(base)).compute_log_prob(data)
    model = add_lora(copy.deepcopy(base), 4, 8, "all-linear", exclude_modules=".*visual.*")
    adapted = [n for n, p in model.named_parameters() if p.requires_grad]
    assert adapted and all(".lora_" in n for n in adapted)
    assert not [n for n in adapted if ".visual." in n]
    mask = data.batch["response_mask"].bool()
    for rmpad in (False, True):
        got, _ = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), model).compute_log_prob(data)
        torch.testing.assert_close(got[mask], expected[mask], rtol=1e-5, atol=1e-5)  # B = 0: the base model

    actor = DataParallelPPOActor(actor_config(use_remove_padding=True), model,
                                 torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0))
    data.batch["old_log_probs"] = expected
    data.batch["advantages"] = torch.ones_like(expected) * data.batch["response_mask"]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    actor.update_policy(data)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert moved and moved <= set(adapted)
    after, _ = actor.compute_log_prob(data)
    assert (after[mask] - expected[mask]).abs().max() > 1e-4
