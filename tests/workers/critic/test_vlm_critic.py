"""The critic on tiny Qwen2-VL / Qwen2.5-VL models (verl.models.vision_value_model): loaded from the actor's folder
(trunk as saved, a new small head), values with images equal a plain per-row forward of the same model in the
padded and the packed path, the images change them, an update moves the vision tower, and a saved critic loads
back with its head."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.tiny_vlm import plain_row_inputs, save_tiny_vlm_dir, tiny_vlm
from tests.workers.actor.test_vlm_actor import vlm_batch
from tests.workers.critic.test_dp_critic import critic_config
from verl.models.value_head import load_value_model, values_from_output
from verl.models.vision_value_model import VisionLanguageValueModel
from verl.workers.critic import DataParallelPPOCritic


def plain_values(model, data, image_token_id):
    """One row at a time, no padding, the model computing its own rope positions."""
    out = torch.zeros(data.batch["responses"].shape)
    for row in range(len(data)):
        model.model.rope_deltas = None
        values = values_from_output(model(**plain_row_inputs(data, row, image_token_id)))[0]
        n = int(data.batch["response_mask"][row].sum())
        out[row, :n] = values[-n - 1: -1]  # the value of response token t is read at the position before it
    return out


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_vlm_critic_loads_from_the_actor_folder_and_values_see_the_images(tmp_path, family):
    folder = save_tiny_vlm_dir(tmp_path / "model", family)
    critic = load_value_model(folder, score_init_std=0.5).float()
    assert isinstance(critic, VisionLanguageValueModel)
    actor = tiny_vlm(family)
    trunk = dict(actor.model.named_parameters())
    for name, param in critic.model.named_parameters():  # the trunk as the actor folder holds it
        assert torch.equal(param, trunk[name]), name
    assert critic.score.bias.abs().max() == 0 and critic.score.weight.abs().max() > 0  # a fresh head

    data = vlm_batch(tmp_path, family)
    with torch.no_grad():
        expected = plain_values(critic, data, actor.config.image_token_id)
    mask = data.batch["response_mask"].bool()
    for rmpad in (False, True):
        got = DataParallelPPOCritic(critic_config(**{"model.use_remove_padding": rmpad}),
                                    copy.deepcopy(critic)).compute_values(data)
        torch.testing.assert_close(got[mask], expected[mask], rtol=1e-4, atol=1e-4)
    blank = copy.deepcopy(data)
    for inputs in blank.non_tensor_batch["multi_modal_inputs"]:
        if "pixel_values" in inputs:
            inputs["pixel_values"] = torch.zeros_like(inputs["pixel_values"])
    got = DataParallelPPOCritic(critic_config(), copy.deepcopy(critic)).compute_values(blank)
    assert (got[mask] - expected[mask]).abs().max() > 1e-4


def test_vlm_critic_update_reaches_the_vision_tower_and_saves_its_head(tmp_path):
    from verl.checkpoint.hf_export import hf_config_of, save_hf_weights

    folder = save_tiny_vlm_dir(tmp_path / "model", "qwen2_5_vl")
    critic = load_value_model(folder).float()
    data = vlm_batch(tmp_path, "qwen2_5_vl")
    worker = DataParallelPPOCritic(critic_config(**{"model.use_remove_padding": True}), critic,
                                   torch.optim.SGD(critic.parameters(), lr=1.0))
    values = worker.compute_values(data)
    data.batch["values"] = values
    data.batch["returns"] = torch.ones_like(values) * data.batch["response_mask"]
    before = {k: v.detach().clone() for k, v in critic.named_parameters()}
    worker.update_critic(data)
    moved = {k for k, v in critic.named_parameters() if not torch.equal(v, before[k])}
    assert any(k.startswith("model.visual.") for k in moved) and "score.weight" in moved

    out = tmp_path / "saved"
    config = hf_config_of(critic)
    save_hf_weights(VisionLanguageValueModel, config, critic.state_dict(), str(out))
    config.save_pretrained(out)
    again = load_value_model(out).float()
    for (name, a), b in zip(critic.state_dict().items(), again.state_dict().values()):
        assert torch.equal(a, b), name
