"""The actor on tiny Qwen2-VL / Qwen2.5-VL models: log-probs with images in the padded and the packed (remove
padding) paths equal plain HF's, and an update moves the vision tower only when it is not frozen."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.tiny_vlm import collated_vlm_prompts, plain_row_inputs, tiny_vlm
from tests.workers.actor.test_dp_actor import actor_config
from verl.data.vision import response_position_ids
from verl.models.vision import suppress_vision_tokens, vision_token_ids
from verl.protocol import DataProto
from verl.utils.torch_functional import get_response_mask
from verl.workers.actor import DataParallelPPOActor

RESPONSE = 5


def vlm_batch(tmp_path, family, prompt_images=(1, 2, 0, 1), response_lengths=(5, 2, 4, 1)) -> DataProto:
    """Prompts from the dataset (images of different sizes, one row without an image), random responses."""
    batch, tokenizer, _ = collated_vlm_prompts(tmp_path, family, prompt_images)
    prompts, prompt_mask = batch["input_ids"], batch["attention_mask"]
    gen = torch.Generator().manual_seed(1)
    responses = torch.randint(10, 300, (len(prompt_images), RESPONSE), generator=gen)
    for row, n in enumerate(response_lengths):
        if n < RESPONSE:
            responses[row, n - 1] = tokenizer.eos_token_id
            responses[row, n:] = tokenizer.pad_token_id
    response_mask = get_response_mask(responses, tokenizer.eos_token_id, dtype=torch.long)
    tensors = {
        "prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
        "attention_mask": torch.cat([prompt_mask, response_mask], 1), "response_mask": response_mask,
        "position_ids": torch.cat([batch["position_ids"], response_position_ids(batch["position_ids"], RESPONSE)], -1),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors={"multi_modal_inputs": batch["multi_modal_inputs"]},
                               meta_info={"temperature": 0.8, "micro_batch_size": 2})


def hf_log_probs(model, data, image_token_id):
    """Plain HF: one row at a time, no padding, the model computing its own rope positions (and the vision
    tokens left out of the response distribution, as the rollout samples it)."""
    out = torch.zeros(data.batch["responses"].shape)
    for row in range(len(data)):
        model.model.rope_deltas = None
        logits = model(**plain_row_inputs(data, row, image_token_id)).logits[0] / 0.8
        logits = suppress_vision_tokens(logits, vision_token_ids(model.config))  # never in a response
        n = int(data.batch["response_mask"][row].sum())
        logp = torch.log_softmax(logits[-n - 1: -1], -1)  # the row ends with its n real response tokens
        out[row, :n] = logp.gather(-1, data.batch["responses"][row, :n, None]).squeeze(-1)
    return out


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_log_probs_with_images_equal_plain_hf_padded_and_packed(tmp_path, family):
    data = vlm_batch(tmp_path, family)
    assert data.batch["position_ids"].shape[1] == 4
    model = tiny_vlm(family)
    with torch.no_grad():
        expected = hf_log_probs(model, data, model.config.image_token_id)
    mask = data.batch["response_mask"].bool()
    for rmpad in (False, True):
        actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), copy.deepcopy(model))
        got, _ = actor.compute_log_prob(data)
        torch.testing.assert_close(got[mask], expected[mask], rtol=1e-4, atol=1e-4)
    # the images matter: without them the numbers differ
    blank = copy.deepcopy(data)
    for inputs in blank.non_tensor_batch["multi_modal_inputs"]:
        if "pixel_values" in inputs:
            inputs["pixel_values"] = torch.zeros_like(inputs["pixel_values"])
    got, _ = DataParallelPPOActor(actor_config(), copy.deepcopy(model)).compute_log_prob(blank)
    assert (got[mask] - expected[mask]).abs().max() > 1e-3


@pytest.mark.parametrize("freeze", [False, True])
def test_update_reaches_the_vision_tower_unless_frozen(tmp_path, freeze):
    from verl.models.vision import freeze_vision_tower

    data = vlm_batch(tmp_path, "qwen2_5_vl")
    model = tiny_vlm("qwen2_5_vl")
    actor = DataParallelPPOActor(actor_config(use_remove_padding=True), model)
    old, _ = actor.compute_log_prob(data)
    data.batch["old_log_probs"] = old
    data.batch["advantages"] = torch.randn(old.shape, generator=torch.Generator().manual_seed(0)) \
        * data.batch["response_mask"]
    if freeze:
        assert freeze_vision_tower(model) > 0
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    actor.actor_optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    actor.update_policy(data)
    moved = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    vision = {k for k in moved if ".visual." in f".{k}"}
    assert any("language_model" in k for k in moved)
    assert (not vision) == freeze, sorted(vision)[:3]
