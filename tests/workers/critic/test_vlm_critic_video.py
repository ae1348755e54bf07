"""The critic (verl.models.vision_value_model) on tiny Qwen2-VL / Qwen2.5-VL models with videos in the prompts:
values equal a plain per-row forward in the padded and the packed path, and the videos change them."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.workers.actor.test_vlm_actor_video import MEDIA, video_batch
from tests.workers.critic.test_dp_critic import critic_config
from verl.models.value_head import load_value_model, values_from_output
from verl.workers.critic import DataParallelPPOCritic


def plain_values(model, data, processor):
    out = torch.zeros(data.batch["responses"].shape)
    for row in range(len(data)):
        model.model.rope_deltas = None
        mask = data.batch["attention_mask"][row].bool()
        ids = data.batch["input_ids"][row][mask][None]
        types = (ids == processor.image_token_id).int() + 2 * (ids == processor.video_token_id).int()
        inputs = data.non_tensor_batch["multi_modal_inputs"][row]
        media = {k: torch.as_tensor(inputs[k]) for k in MEDIA if k in inputs}
        values = values_from_output(model(input_ids=ids, mm_token_type_ids=types, **media))[0]
        n = int(data.batch["response_mask"][row].sum())
        out[row, :n] = values[-n - 1: -1]
    return out


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_vlm_critic_values_see_the_videos(tmp_path, family):
    data, processor = video_batch(tmp_path, family)
    critic = load_value_model(str(tmp_path / family), score_init_std=0.5).float()
    with torch.no_grad():
        expected = plain_values(critic, data, processor)
    mask = data.batch["response_mask"].bool()
    for rmpad in (False, True):
        got = DataParallelPPOCritic(critic_config(**{"model.use_remove_padding": rmpad}),
                                    copy.deepcopy(critic)).compute_values(data)
        torch.testing.assert_close(got[mask], expected[mask], rtol=1e-4, atol=1e-4)
    blank = copy.deepcopy(data)
    for inputs in blank.non_tensor_batch["multi_modal_inputs"]:
        if "pixel_values_videos" in inputs:
            inputs["pixel_values_videos"] = torch.zeros_like(inputs["pixel_values_videos"])
    got = DataParallelPPOCritic(critic_config(), copy.deepcopy(critic)).compute_values(blank)
    assert (got[mask] - expected[mask]).abs().max() > 1e-4
