"""The actor on tiny Qwen2-VL / Qwen2.5-VL models with videos in the prompts: log-probs in the padded and the packed
(remove padding) paths equal plain HF's (the model computing its own 3-D positions from the video grids)."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from PIL import Image

from tests.data.conftest import make_row
from tests.helpers.tiny_video import frame, save_tiny_video_vlm_dir, write_mp4
from tests.helpers.tiny_vlm import collate_rows, tiny_vlm
from tests.workers.actor.test_dp_actor import actor_config
from verl.data.vision import response_position_ids
from verl.models.vision import suppress_vision_tokens, vision_token_ids
from verl.protocol import DataProto
from verl.utils.torch_functional import get_response_mask
from verl.workers.actor import DataParallelPPOActor

RESPONSE = 5
MEDIA = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


def png(index: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(frame(index, 16, 16)).save(buffer, format="PNG")
    return buffer.getvalue()


def video_rows(clip: str) -> list[dict]:
    """Row 0: one video; row 1: an image then a video at 1 fps; row 2: text; row 3: two videos."""
    rows = [make_row("<video>What moves?", index=0), make_row("<image>and<video>Same?", index=1),
            make_row("No picture here.", index=2), make_row("<video><video>Which is longer?", index=3)]
    for row in rows:  # every row names both columns (parquet takes its schema from the rows)
        row["images"], row["videos"] = [], []
    rows[0]["videos"] = [{"video": clip}]
    rows[1]["images"], rows[1]["videos"] = [{"bytes": png(1)}], [{"video": clip, "fps": 1.0}]
    rows[3]["videos"] = [{"video": clip, "nframes": 6}, {"video": clip, "nframes": 4}]
    return rows


def video_batch(tmp_path, family: str, response_lengths=(5, 2, 4, 1)):
    folder = save_tiny_video_vlm_dir(tmp_path / family, family)
    clip = write_mp4(tmp_path / "clip.mp4", frames=10, fps=4.0)
    batch, tokenizer, processor = collate_rows(folder, tmp_path / "rows.parquet", video_rows(clip),
                                               max_prompt_length=160)
    prompts, prompt_mask = batch["input_ids"], batch["attention_mask"]
    gen = torch.Generator().manual_seed(1)
    responses = torch.randint(10, 300, (len(response_lengths), RESPONSE), generator=gen)
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
    data = DataProto.from_dict(tensors=tensors, non_tensors={"multi_modal_inputs": batch["multi_modal_inputs"]},
                               meta_info={"temperature": 0.8, "micro_batch_size": 2})
    return data, processor


def hf_log_probs(model, data, processor):
    """Plain HF, one row at a time without padding, the model computing its own rope positions."""
    out = torch.zeros(data.batch["responses"].shape)
    for row in range(len(data)):
        model.model.rope_deltas = None
        mask = data.batch["attention_mask"][row].bool()
        ids = data.batch["input_ids"][row][mask][None]
        types = (ids == processor.image_token_id).int() + 2 * (ids == processor.video_token_id).int()
        inputs = data.non_tensor_batch["multi_modal_inputs"][row]
        media = {k: torch.as_tensor(inputs[k]) for k in MEDIA if k in inputs}
        logits = model(input_ids=ids, mm_token_type_ids=types, **media).logits[0] / 0.8
        logits = suppress_vision_tokens(logits, vision_token_ids(model.config))
        n = int(data.batch["response_mask"][row].sum())
        logp = torch.log_softmax(logits[-n - 1: -1], -1)
        out[row, :n] = logp.gather(-1, data.batch["responses"][row, :n, None]).squeeze(-1)
    return out


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_log_probs_with_videos_equal_plain_hf_padded_and_packed(tmp_path, family):
    data, processor = video_batch(tmp_path, family)
    rows = data.non_tensor_batch["multi_modal_inputs"]
    assert rows[3]["video_grid_thw"].tolist() == [[3, 4, 6], [2, 4, 6]] and "video_grid_thw" not in rows[2]
    model = tiny_vlm(family)
    with torch.no_grad():
        expected = hf_log_probs(model, data, processor)
    mask = data.batch["response_mask"].bool()
    for rmpad in (False, True):
        actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), copy.deepcopy(model))
        got, _ = actor.compute_log_prob(data)
        torch.testing.assert_close(got[mask], expected[mask], rtol=1e-4, atol=1e-4)
    # the videos matter: without their pixels the numbers differ
    blank = copy.deepcopy(data)
    for inputs in blank.non_tensor_batch["multi_modal_inputs"]:
        if "pixel_values_videos" in inputs:
            inputs["pixel_values_videos"] = torch.zeros_like(inputs["pixel_values_videos"])
    got, _ = DataParallelPPOActor(actor_config(), copy.deepcopy(model)).compute_log_prob(blank)
    assert (got[mask] - expected[mask]).abs().max() > 1e-3


def test_update_with_videos_reaches_the_vision_tower(tmp_path):
    data, _ = video_batch(tmp_path, "qwen2_5_vl")
    model = tiny_vlm("qwen2_5_vl")
    actor = DataParallelPPOActor(actor_config(use_remove_padding=True), model)
    old, _ = actor.compute_log_prob(data)
    data.batch["old_log_probs"] = old
    data.batch["advantages"] = torch.randn(old.shape, generator=torch.Generator().manual_seed(0)) \
        * data.batch["response_mask"]
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    actor.actor_optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    actor.update_policy(data)
    moved = {k for k, v in model.named_parameters() if not torch.equal(v, before[k])}
    assert any(".visual." in f".{k}" for k in moved) and any("language_model" in k for k in moved)
