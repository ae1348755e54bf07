"""The HF rollout with images on tiny random Qwen2-VL / Qwen2.5-VL models (fp32): prompts from the dataset (left
padded, (4, P) position ids, multi_modal_inputs), generation sees the images, the responses' position ids continue
every axis, and the sampled tokens' log-probs equal the actor's recomputation in both actor paths."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.tiny_vlm import collated_vlm_prompts, tiny_vlm
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.rollout.test_hf_rollout import rollout_config
from verl.data.vision import response_position_ids
from verl.models.vision import suppress_vision_tokens, vision_token_ids
from verl.protocol import DataProto
from verl.workers.actor import DataParallelPPOActor
from verl.workers.rollout import HFRollout

RESPONSE = 6
TEMPERATURE = 0.8


def gen_batch(batch, tokenizer, **meta) -> DataProto:
    """What the trainer sends the sync rollout: the prompt tensors and the rows' images."""
    info = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    info.update(meta)
    return DataProto.from_dict(
        tensors={k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")},
        non_tensors={"multi_modal_inputs": batch["multi_modal_inputs"]}, meta_info=info)


def with_images(out: DataProto, prompts: DataProto) -> DataProto:
    out = copy.deepcopy(out)
    out.non_tensor_batch["multi_modal_inputs"] = prompts.non_tensor_batch["multi_modal_inputs"]
    out.meta_info.update(temperature=TEMPERATURE, micro_batch_size=2)
    return out


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_sampled_log_probs_equal_the_actors_recomputation(tmp_path, family):
    batch, tokenizer, _ = collated_vlm_prompts(tmp_path, family)
    prompts = gen_batch(batch, tokenizer, do_sample=True, temperature=TEMPERATURE)
    model = tiny_vlm(family)
    torch.manual_seed(3)
    rollout = HFRollout(model, rollout_config(response_length=RESPONSE, temperature=TEMPERATURE,
                                              calculate_log_probs=True), micro_batch_size=2)
    out = rollout.generate_sequences(prompts)
    b = out.batch
    prompt_positions = batch["position_ids"]
    assert b["position_ids"].shape == (4, 4, prompt_positions.size(-1) + RESPONSE)
    assert torch.equal(b["position_ids"], torch.cat([prompt_positions,
                                                     response_position_ids(prompt_positions, RESPONSE)], -1))
    assert "multi_modal_inputs" not in out.non_tensor_batch  # the trainer's batch keeps its own copy
    mask = b["response_mask"].bool()
    assert mask.sum() >= 8
    data = with_images(out, prompts)
    for rmpad in (False, True):
        actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), copy.deepcopy(model))
        recomputed, _ = actor.compute_log_prob(data)
        torch.testing.assert_close(recomputed[mask], b["rollout_log_probs"][mask], rtol=1e-4, atol=1e-4)
    # the images were seen: recomputing without them gives other numbers
    blank = with_images(out, prompts)
    blank.non_tensor_batch["multi_modal_inputs"] = copy.deepcopy(blank.non_tensor_batch["multi_modal_inputs"])
    for inputs in blank.non_tensor_batch["multi_modal_inputs"]:
        if "pixel_values" in inputs:
            inputs["pixel_values"] = torch.zeros_like(inputs["pixel_values"])
    recomputed, _ = DataParallelPPOActor(actor_config(), copy.deepcopy(model)).compute_log_prob(blank)
    assert (recomputed[mask] - b["rollout_log_probs"][mask]).abs().max() > 1e-3


def test_greedy_tokens_are_the_argmax_of_a_forward_with_images(tmp_path):
    """Greedy generation with images, micro-batches of one row and of the whole batch, give the same tokens, each
    the argmax of one full forward of prompt + response with the rows' images and the batch's position ids."""
    batch, tokenizer, _ = collated_vlm_prompts(tmp_path, "qwen2_5_vl")
    model = tiny_vlm("qwen2_5_vl")
    outs = [HFRollout(model, rollout_config(response_length=RESPONSE), micro_batch_size=size)
            .generate_sequences(gen_batch(batch, tokenizer, do_sample=False)) for size in (1, 4)]
    assert torch.equal(outs[0].batch["responses"], outs[1].batch["responses"])
    b = outs[1].batch
    inputs = batch["multi_modal_inputs"]
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"].transpose(0, 1),
                       pixel_values=torch.cat([r["pixel_values"] for r in inputs if "pixel_values" in r]),
                       image_grid_thw=torch.cat([r["image_grid_thw"] for r in inputs if "image_grid_thw" in r]),
                       ).logits[:, b["prompts"].size(1) - 1: -1]
    mask = b["response_mask"].bool()
    logits = suppress_vision_tokens(logits, vision_token_ids(model.config))  # a response never holds one
    assert torch.equal(logits.argmax(-1)[mask], b["responses"][mask])


def test_a_response_never_samples_a_vision_token(tmp_path):
    """A model that would rather write <|image_pad|> (its logit raised by 50) writes other tokens, and the recorded
    log-probs are those the actor recomputes (both leave the vision tokens out): an <|image_pad|> in a response
    would stop the actor's forward ("Image features and image tokens do not match")."""
    batch, tokenizer, _ = collated_vlm_prompts(tmp_path, "qwen2_vl")
    model = tiny_vlm("qwen2_vl")
    image_pad = model.config.image_token_id
    model.lm_head.register_forward_hook(lambda module, args, out: out.index_add(
        -1, torch.tensor([image_pad]), torch.full((*out.shape[:-1], 1), 50.0)))
    prompts = gen_batch(batch, tokenizer, do_sample=True, temperature=TEMPERATURE)
    torch.manual_seed(0)
    out = HFRollout(model, rollout_config(response_length=RESPONSE, temperature=TEMPERATURE,
                                          calculate_log_probs=True), micro_batch_size=4).generate_sequences(prompts)
    b = out.batch
    mask = b["response_mask"].bool()
    assert not set(b["responses"][mask].tolist()) & set(vision_token_ids(model.config))
    recomputed, _ = DataParallelPPOActor(actor_config(), model).compute_log_prob(with_images(out, prompts))
    torch.testing.assert_close(recomputed[mask], b["rollout_log_probs"][mask], rtol=1e-4, atol=1e-4)


def test_images_for_a_text_model_are_refused(tmp_path):
    from tests.helpers.tiny_model import tiny_llama

    batch, tokenizer, _ = collated_vlm_prompts(tmp_path, "qwen2_5_vl", prompt_images=(1,))
    model = tiny_llama()
    model.config.image_token_id = None
    with pytest.raises(ValueError, match="image_token_id"):
        HFRollout(model, rollout_config(response_length=2)).generate_sequences(gen_batch(batch, tokenizer))
