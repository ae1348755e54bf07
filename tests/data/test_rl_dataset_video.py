"""Videos in RL rows (data.video_key, <video> placeholders): reading and sampling (verl.data.video), the dataset's
items, and the data check before Ray."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from tests.data.conftest import make_row, write_rows
from tests.helpers.tiny_video import frame, save_tiny_video_vlm_dir, write_mp4
from tests.helpers.tiny_vlm import tiny_vlm
from verl.data import RLHFDataset, collate_fn
from verl.data.prompt_ids import PromptTooLongError
from verl.data.video import VideoError, load_video, smart_nframes
from verl.models.loader import load_tokenizer
from verl.models.processor import load_processor
from verl.protocol import DataProto
from verl.trainer.config import DataConfig


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def vlm(tmp_path_factory, request):
    folder = save_tiny_video_vlm_dir(tmp_path_factory.mktemp(request.param), request.param)
    tokenizer = load_tokenizer(folder, "actor_rollout_ref.model.path")
    return request.param, tokenizer, load_processor(folder, tokenizer, "actor_rollout_ref.model.path")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_mp4(tmp_path_factory.mktemp("clips") / "clip.mp4", frames=10, fps=4.0)


def png(index: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(frame(index)).save(buffer, format="PNG")
    return buffer.getvalue()


def config(**overrides):
    base = dict(max_prompt_length=256, shuffle=False, return_raw_chat=True)
    base.update(overrides)
    return DataConfig(**base)


def test_smart_nframes_follows_qwen_vl_utils():
    # 10 frames at 4 fps, 2 fps wanted: 5 -> at least min_frames 4 -> floored to a multiple of 2: 4
    assert smart_nframes({}, 10, 4.0) == 4
    # 100 frames at 10 fps, fps 2: 20 frames
    assert smart_nframes({"fps": 2}, 100, 10.0) == 20
    assert smart_nframes({"fps": 2, "max_frames": 9}, 100, 10.0) == 8
    # nframes rounded to a multiple of 2 with Python round (half to even): 5 -> 4, 7 -> 8
    assert smart_nframes({"nframes": 5}, 10, 4.0) == 4 and smart_nframes({"nframes": 7}, 10, 4.0) == 8
    with pytest.raises(ValueError, match="nframes must lie in"):
        smart_nframes({"nframes": 12}, 10, 4.0)
    with pytest.raises(ValueError, match="either nframes or fps"):
        smart_nframes({"nframes": 4, "fps": 2}, 10, 4.0)


def test_a_video_file_is_decoded_sampled_and_resized(vlm, clip):
    _, _, processor = vlm
    frames, meta = load_video({"video": clip}, "row 0", processor)
    assert meta["frames_indices"] == [0, 3, 6, 9] and meta["fps"] == 4.0 and meta["total_num_frames"] == 10
    assert frames.shape == (4, 3, 16, 24) and frames.dtype == np.uint8  # 16x24 already multiples of 8, in bounds
    # mp4v is lossy: frame 3's red level is near 3 * 40
    assert abs(int(frames[1, 0].astype(int).mean()) - 120) < 12
    frames, meta = load_video({"video": "file://" + clip, "nframes": 2, "max_pixels": 8 * 8 * 2}, "row 0", processor)
    assert meta["frames_indices"] == [0, 9] and frames.shape[2:] == (8, 8)


def test_a_frame_list_is_padded_to_even_frames(vlm):
    _, _, processor = vlm
    frames, meta = load_video({"video": [{"bytes": png(i)} for i in range(3)], "fps": 1.0}, "row 0", processor)
    assert frames.shape == (4, 3, 16, 24) and np.array_equal(frames[3], frames[2])
    assert meta == {"fps": 1.0, "total_num_frames": 4, "frames_indices": [0, 1, 2, 3]}


def video_rows(tmp_path, clip, videos_per_row=(1, 2)):
    rows = []
    for i, count in enumerate(videos_per_row):
        row = make_row("<video>" * count + f"What moves? ({i})", index=20 + i)
        row["videos"] = [{"video": clip, "fps": 2.0}] * count
        rows.append(row)
    return write_rows(tmp_path / "videos.parquet", rows)


def test_items_carry_video_tokens_inputs_and_positions(tmp_path, vlm, clip):
    family, tokenizer, processor = vlm
    dataset = RLHFDataset(video_rows(tmp_path, clip), tokenizer, config(), processor=processor)
    item = dataset[1]
    # 4 frames of 16x24: t=2, 4x6 patches, merged 2x2: 12 tokens per video; two videos
    assert int((item["input_ids"] == processor.video_token_id).sum()) == 24
    inputs = item["multi_modal_inputs"]
    assert inputs["video_grid_thw"].tolist() == [[2, 4, 6], [2, 4, 6]]
    assert inputs["pixel_values_videos"].shape == (96, 3 * 2 * 4 * 4)
    if family == "qwen2_5_vl":  # sampled fps = 4 / 10 * 4 = 1.6: 2 / 1.6 seconds per temporal patch
        assert torch.allclose(torch.as_tensor(inputs["second_per_grid_ts"]), torch.tensor([1.25, 1.25]))
    else:
        assert "second_per_grid_ts" not in inputs
    videos = item["multi_modal_data"]["video"]
    assert len(videos) == 2 and videos[0][0].shape == (4, 3, 16, 24) and videos[0][1]["frames_indices"] == [0, 3, 6, 9]
    assert "videos" not in item and item["raw_prompt_ids"].count(processor.video_token_id) == 2
    # the (4, L) positions: rows 1-3 equal the model's own get_rope_index on the unpadded prompt
    valid = item["attention_mask"].bool()
    ids = item["input_ids"][valid][None]
    types = (ids == processor.video_token_id).int() * 2
    extra = {"second_per_grid_ts": inputs["second_per_grid_ts"]} if family == "qwen2_5_vl" else {}
    expected, _ = tiny_vlm(family).model.get_rope_index(ids, mm_token_type_ids=types,
                                                        video_grid_thw=inputs["video_grid_thw"], **extra)
    assert torch.equal(item["position_ids"][1:, valid], expected[:, 0])
    batch = DataProto.from_single_dict(collate_fn([dataset[0], dataset[1]]))
    assert batch.non_tensor_batch["multi_modal_inputs"][0]["video_grid_thw"].tolist() == [[2, 4, 6]]


def test_video_key_names_the_column_and_mixed_images_and_videos_work(tmp_path, vlm, clip):
    _, tokenizer, processor = vlm
    row = {**make_row("<image>then<video>?", index=0), "images": [{"bytes": png(0)}], "clips": [{"video": clip}]}
    item = RLHFDataset(write_rows(tmp_path / "mixed.parquet", [row]), tokenizer, config(video_key="clips"),
                       processor=processor)[0]
    assert set(item["multi_modal_inputs"]) >= {"pixel_values", "image_grid_thw", "pixel_values_videos",
                                               "video_grid_thw"}
    assert len(item["multi_modal_data"]["image"]) == 1 and len(item["multi_modal_data"]["video"]) == 1


def test_bad_videos_placeholders_and_lengths_are_refused_by_row(tmp_path, vlm, clip):
    _, tokenizer, processor = vlm
    rows = [make_row("<video>Go.", index=i) for i in range(2)]
    rows[0]["videos"] = [{"video": str(tmp_path / "missing.mp4")}]
    rows[1]["videos"] = [{"video": clip}]
    dataset = RLHFDataset(write_rows(tmp_path / "bad.parquet", rows), tokenizer, config(), processor=processor)
    with pytest.raises(VideoError, match=r"row 0 column 'videos' \(data.video_key\) video 0: video file .* does not "):
        dataset[0]
    rows = [{**make_row("<video><video>Go.", index=0), "videos": [{"video": clip}]}]
    with pytest.raises(ValueError, match="2 <video> placeholders but column 'videos' .* holds 1 videos"):
        RLHFDataset(write_rows(tmp_path / "more.parquet", rows), tokenizer, config(), processor=processor)[0]
    rows = [{**make_row("<video>Go.", index=0), "videos": [{"video": clip}]}]
    with pytest.raises(PromptTooLongError, match="with its image and video tokens"):
        RLHFDataset(write_rows(tmp_path / "long.parquet", rows), tokenizer, config(max_prompt_length=20),
                    processor=processor)[0]


def test_data_check_names_bad_video_rows_and_counts_video_tokens(tmp_path, vlm, clip):
    from verl.data.data_check import RowNeeds, check_split

    _, tokenizer, processor = vlm
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"not a video")
    rows = [make_row("<video>Go.", index=i) for i in range(5)]
    for row in rows:
        row["videos"] = [{"video": clip}]
    rows[1]["videos"] = [{"video": str(tmp_path / "missing.mp4")}]
    rows[2]["videos"] = [{"video": str(garbage)}]
    rows[3]["prompt"] = [{"role": "user", "content": "<video><video>Go."}]
    rows[4]["videos"] = [{"video": clip, "nframes": 8}]  # t=4: 24 video tokens instead of 12
    path = write_rows(tmp_path / "check.parquet", rows)
    limit = int(RLHFDataset(path, tokenizer, config(), processor=processor)[0]["attention_mask"].sum()) + 6
    report = check_split("data.train_files", [path], config(max_prompt_length=limit), tokenizer,
                         RowNeeds(has_scorer=lambda source: True), processor=processor)
    text = "\n".join(report.problems)
    assert "2 rows have a missing or unreadable video in column 'videos' (data.video_key): check.parquet rows 1 (" \
        in text
    assert "missing.mp4' does not exist" in text and "OpenCV cannot open video file" in text
    assert "1 rows have a different number of <video> placeholders than videos in column 'videos': " \
           "check.parquet row 3" in text
    assert f"1 of 5 prompts are longer than data.max_prompt_length={limit} tokens with the chat template applied and " \
           "image / video tokens counted: check.parquet row 4 (" in text


def test_videos_for_a_text_model_are_refused(tmp_path, clip, tokenizer):
    path = write_rows(tmp_path / "v.parquet", [{**make_row("<video>Go.", index=0), "videos": [{"video": clip}]}])
    with pytest.raises(NotImplementedError, match=r"column 'videos' \(data.video_key\) holds videos, but the model"):
        RLHFDataset(path, tokenizer, config(), processor=None)
    # a data.video_key the files do not have: the rows are text rows
    assert torch.is_tensor(RLHFDataset(path, tokenizer, config(video_key="clips"), processor=None)[0]["input_ids"])


def test_filter_overlong_prompts_counts_video_tokens(tmp_path, vlm, clip):
    _, tokenizer, processor = vlm
    rows = [{**make_row("<video>Go.", index=0), "videos": [{"video": clip, "nframes": 2}]},
            {**make_row("<video>Go.", index=1), "videos": [{"video": clip, "nframes": 8}]}]
    path = write_rows(tmp_path / "filter.parquet", rows)
    short = int(RLHFDataset(path, tokenizer, config(), processor=processor)[0]["attention_mask"].sum())
    # the same text; row 1's 8 frames take 4 temporal patches of 6 tokens where row 0's take 1 (and its timestamps)
    kept = RLHFDataset(path, tokenizer, config(max_prompt_length=short + 4, filter_overlong_prompts=True),
                       processor=processor)
    assert len(kept) == 1 and kept[0]["extra_info"]["index"] == 0
