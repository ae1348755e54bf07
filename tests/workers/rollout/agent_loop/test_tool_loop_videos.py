"""tool_agent with video rows on tiny random Qwen2-VL / Qwen2.5-VL folders, the HF agent-loop backend on CPU.

The first turn is scripted (a `zoom` call answered with an image, tests/workers/rollout/agent_loop/
test_tool_loop_images.py), later turns are the model's own. Checked: the row's videos go with every request
(`video_data`), the batch keeps the dataset's video inputs after the row's images and the tool's image, and the actor
recomputes the same log-probs as plain HF on the whole sequence with every image and video.
"""

from __future__ import annotations

import copy

import pytest
import torch

from tests.data.conftest import make_row
from tests.helpers.tiny_video import save_tiny_video_vlm_dir, write_mp4
from tests.helpers.tiny_vlm import collate_rows, png, tiny_vlm
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.rollout.agent_loop.test_tool_loop_images import (
    SCRIPTED_LOG_PROB,
    TEMPERATURE,
    _config,
    _generate,
)
from verl.models.vision import suppress_vision_tokens, vision_token_ids
from verl.workers.actor import DataParallelPPOActor

MEDIA = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


def video_rows(tmp_path, family: str):
    clip = write_mp4(tmp_path / "clip.mp4", frames=10, fps=4.0)
    rows = [make_row("<video>What moves?", index=0), make_row("<image>and<video>Same?", index=1),
            make_row("No video.", index=2)]
    for row in rows:
        row["agent_name"], row["images"], row["videos"] = "tool_agent", [], []
    rows[0]["videos"] = [{"video": clip}]
    rows[1]["images"], rows[1]["videos"] = [{"bytes": png((16, 16), (200, 0, 0))}], [{"video": clip, "nframes": 6}]
    return collate_rows(save_tiny_video_vlm_dir(tmp_path / family, family), tmp_path / f"{family}.parquet", rows,
                        return_raw_chat=True)


def plain_hf_log_probs(model, out, processor) -> torch.Tensor:
    result = torch.zeros(out.batch["responses"].shape)
    prompt_length = out.batch["prompts"].size(1)
    for row in range(len(out)):
        mask = out.batch["attention_mask"][row].bool()
        ids = out.batch["input_ids"][row][mask][None]
        inputs = out.non_tensor_batch["multi_modal_inputs"][row]
        types = (ids == processor.image_token_id).int() + 2 * (ids == processor.video_token_id).int()
        model.model.rope_deltas = None
        logits = model(input_ids=ids, mm_token_type_ids=types,
                       **{k: torch.as_tensor(inputs[k]) for k in MEDIA if k in inputs}).logits[0]
        logits = suppress_vision_tokens(logits, vision_token_ids(model.config))
        n_prompt, n = int(mask[:prompt_length].sum()), int(mask[prompt_length:].sum())
        logp = torch.log_softmax(logits[n_prompt - 1: n_prompt + n - 1] / TEMPERATURE, -1)
        result[row, :n] = logp.gather(-1, out.batch["responses"][row, :n, None]).squeeze(-1)
    return result


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl"])
def test_video_rows_go_through_the_tool_loop_and_the_actor_scores_them_like_plain_hf(tmp_path, family, monkeypatch):
    from tests.workers.rollout.agent_loop import test_tool_loop_images as images_test

    batch, tokenizer, processor = video_rows(tmp_path, family)
    sent: list[tuple[int, int]] = []  # (row, videos on the request)
    add = images_test.RecordingBackend.add

    def recording_add(self, request):
        sent.append((request.order[0], len(request.video_data or [])))
        add(self, request)

    monkeypatch.setattr(images_test.RecordingBackend, "add", recording_add)
    model = tiny_vlm(family)
    out, _, _ = _generate(_config(tmp_path), tokenizer, processor, batch, model=model, do_sample=True)
    # every request of a row carries the row's videos: the scripted call, then the model's turn after the tool
    assert sorted(sent) == [(0, 1), (0, 1), (1, 1), (1, 1), (2, 0), (2, 0)]
    for row in range(len(out)):
        inputs, dataset = out.non_tensor_batch["multi_modal_inputs"][row], batch["multi_modal_inputs"][row]
        for key in ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts"):
            assert (key in inputs) == (key in dataset)
            if key in dataset:
                assert torch.equal(torch.as_tensor(inputs[key]), torch.as_tensor(dataset[key]))
        # the row's images and the tool's image
        assert len(inputs["image_grid_thw"]) == (2 if row == 1 else 1)
        assert int((out.batch["prompts"][row] == processor.video_token_id).sum()) == \
            int(torch.as_tensor(dataset.get("video_grid_thw", torch.zeros(0, 3))).prod(-1).sum()) // 4
    data = copy.deepcopy(out)
    data.meta_info.update(temperature=TEMPERATURE, micro_batch_size=2)
    mask = out.batch["response_mask"].bool()
    with torch.no_grad():
        expected = plain_hf_log_probs(model, out, processor)
    for rmpad in (False, True):
        actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), copy.deepcopy(model))
        got, _ = actor.compute_log_prob(data)
        torch.testing.assert_close(got[mask], expected[mask], rtol=1e-4, atol=1e-4)
    sampled = mask & (out.batch["rollout_log_probs"] != SCRIPTED_LOG_PROB)
    assert int(sampled.sum()) >= len(out)
    torch.testing.assert_close(got[sampled], out.batch["rollout_log_probs"][sampled], rtol=1e-4, atol=1e-4)
