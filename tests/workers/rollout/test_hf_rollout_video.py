"""The sync HF rollout with videos in the prompts (tiny Qwen2-VL / Qwen2.5-VL): generate sees the rows' videos and
the log-probs it samples with equal the actor's recomputation on the returned batch, padded and packed."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.data.conftest import make_row
from tests.helpers.tiny_video import save_tiny_video_vlm_dir, write_mp4
from tests.helpers.tiny_vlm import collate_rows, tiny_vlm
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.rollout.test_hf_rollout import rollout_config
from tests.workers.rollout.test_hf_rollout_vlm import TEMPERATURE, gen_batch, with_images
from verl.workers.actor import DataParallelPPOActor
from verl.workers.rollout import HFRollout

RESPONSE = 6


def video_prompts(tmp_path, family):
    folder = save_tiny_video_vlm_dir(tmp_path / family, family)
    clip = write_mp4(tmp_path / "long.mp4", frames=40, fps=4.0)
    rows = [make_row("<video>Go.", index=0), make_row("<video>What moves in it?", index=1),
            make_row("Just text here.", index=2), make_row("<video><video>Compare.", index=3)]
    for row in rows:
        row["videos"] = []
    # 40 frames at 4 fps sampled at 0.5 fps: 4 frames, sampled fps 0.4, 5 s per temporal patch: on Qwen2.5-VL the
    # time axis of the video reaches past the few text tokens after it
    rows[0]["videos"] = [{"video": clip, "fps": 0.5}]
    rows[1]["videos"] = [{"video": clip, "nframes": 6}]
    rows[3]["videos"] = [{"video": clip, "nframes": 2}, {"video": clip, "fps": 0.5}]
    return collate_rows(folder, tmp_path / "rows.parquet", rows, max_prompt_length=96)


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_sampled_log_probs_with_videos_equal_the_actors_recomputation(tmp_path, family):
    batch, tokenizer, processor = video_prompts(tmp_path, family)
    positions = batch["position_ids"]
    if family == "qwen2_5_vl":  # the case HF's decoding positions continue from the largest mrope position
        assert bool((positions[0, 1:].amax() > positions[0, 1:, -1]).all())
    prompts = gen_batch(batch, tokenizer, do_sample=True, temperature=TEMPERATURE)
    model = tiny_vlm(family)
    torch.manual_seed(3)
    rollout = HFRollout(model, rollout_config(response_length=RESPONSE, temperature=TEMPERATURE,
                                              calculate_log_probs=True), micro_batch_size=2)
    out = rollout.generate_sequences(prompts)
    b = out.batch
    mask = b["response_mask"].bool()
    assert mask.sum() >= 8
    assert not bool((b["responses"] == processor.video_token_id).any())
    data = with_images(out, prompts)
    for rmpad in (False, True):
        actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), copy.deepcopy(model))
        recomputed, _ = actor.compute_log_prob(data)
        torch.testing.assert_close(recomputed[mask], b["rollout_log_probs"][mask], rtol=1e-4, atol=1e-4)
    # the videos were seen: recomputing without their pixels gives other numbers
    blank = with_images(out, prompts)
    blank.non_tensor_batch["multi_modal_inputs"] = copy.deepcopy(blank.non_tensor_batch["multi_modal_inputs"])
    for inputs in blank.non_tensor_batch["multi_modal_inputs"]:
        if "pixel_values_videos" in inputs:
            inputs["pixel_values_videos"] = torch.zeros_like(inputs["pixel_values_videos"])
    recomputed, _ = DataParallelPPOActor(actor_config(), copy.deepcopy(model)).compute_log_prob(blank)
    assert (recomputed[mask] - b["rollout_log_probs"][mask]).abs().max() > 1e-3
