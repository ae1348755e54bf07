"""RLHFDataset on vision-language rows (geo3k layout) with a tiny Qwen-VL processor built here."""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image

from tests.data.conftest import make_row, write_rows
from tests.helpers.tiny_vlm import save_tiny_vlm_dir
from verl.data import RLHFDataset, collate_fn
from verl.data.prompt_ids import PromptTooLongError
from verl.data.vision import ImageError
from verl.models.loader import load_tokenizer
from verl.models.processor import load_processor
from verl.protocol import DataProto
from verl.trainer.config import DataConfig


def png(size=(16, 16), color=(255, 0, 0)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(scope="module")
def vlm(tmp_path_factory):
    folder = save_tiny_vlm_dir(tmp_path_factory.mktemp("vlm"))
    tokenizer = load_tokenizer(folder, "actor_rollout_ref.model.path")
    return tokenizer, load_processor(folder, tokenizer, "actor_rollout_ref.model.path")


def vision_rows(tmp_path, images_per_row=(1, 2), **extra):
    rows = []
    for i, count in enumerate(images_per_row):
        row = make_row("<image>" * count + f"How many red squares? ({i})", index=10 + i)
        row["images"] = [{"bytes": png(color=(255, 0, 10 * k)), "path": None} for k in range(count)]
        row.update(extra)
        rows.append(row)
    return write_rows(tmp_path / "vl.parquet", rows)


def config(**overrides):
    base = dict(max_prompt_length=128, shuffle=False, return_raw_chat=True)
    base.update(overrides)
    return DataConfig(**base)


def test_items_carry_expanded_prompts_mrope_positions_and_multi_modal_inputs(tmp_path, vlm):
    tokenizer, processor = vlm
    dataset = RLHFDataset(vision_rows(tmp_path), tokenizer, config(), processor=processor)
    image_id = processor.image_token_id
    item = dataset[1]
    # 16x16 px -> 4x4 patches of 4 px, merged 2x2: 4 tokens per image; two images
    assert int((item["input_ids"] == image_id).sum()) == 8
    assert item["position_ids"].shape == (4, 128)
    assert item["multi_modal_inputs"]["image_grid_thw"].tolist() == [[1, 4, 4], [1, 4, 4]]
    assert item["multi_modal_inputs"]["pixel_values"].shape[0] == 32
    assert len(item["multi_modal_data"]["image"]) == 2 and "images" not in item
    assert item["raw_prompt_ids"].count(image_id) == 2  # one per image: engines expand it themselves
    assert item["raw_prompt"][0]["content"].startswith("<image><image>")
    batch = DataProto.from_single_dict(collate_fn([dataset[0], dataset[1]]))
    assert batch.batch["position_ids"].shape == (2, 4, 128)
    assert batch.non_tensor_batch["multi_modal_inputs"][0]["image_grid_thw"].tolist() == [[1, 4, 4]]
    # data.image_key names the column; return_multi_modal_inputs=false leaves the inputs out
    renamed = write_rows(tmp_path / "pics.parquet", [{**make_row("<image>Hi", index=0), "pics": [{"bytes": png()}]}])
    item = RLHFDataset(renamed, tokenizer, config(image_key="pics", return_multi_modal_inputs=False),
                       processor=processor)[0]
    assert "multi_modal_inputs" not in item and len(item["multi_modal_data"]["image"]) == 1


def test_bad_images_and_placeholder_mismatch_name_the_row(tmp_path, vlm):
    tokenizer, processor = vlm
    rows = [make_row("<image>Count.", index=0), make_row("<image><image>Count.", index=1)]
    rows[0]["images"] = [{"bytes": b"garbage", "path": None}]
    rows[1]["images"] = [{"bytes": png(), "path": None}]
    dataset = RLHFDataset(write_rows(tmp_path / "bad.parquet", rows), tokenizer, config(), processor=processor)
    with pytest.raises(ImageError, match="row 0 column 'images' \\(data.image_key\\) image 0: not a readable"):
        dataset[0]
    with pytest.raises(ValueError, match="row 1: the prompt has 2 <image> placeholders but column 'images'"):
        dataset[1]


def test_image_tokens_count_toward_max_prompt_length(tmp_path, vlm):
    tokenizer, processor = vlm
    path = vision_rows(tmp_path, images_per_row=(1, 3))
    lengths = [int(RLHFDataset(path, tokenizer, config(max_prompt_length=512), processor=processor)[i]
                   ["attention_mask"].sum()) for i in range(2)]
    limit = (lengths[0] + lengths[1]) // 2  # row 1 fits in text, not with its 12 image tokens
    with pytest.raises(PromptTooLongError, match="row 1 has .* with its image tokens"):
        RLHFDataset(path, tokenizer, config(max_prompt_length=limit, truncation="left"), processor=processor)[1]
    kept = RLHFDataset(path, tokenizer, config(max_prompt_length=limit, filter_overlong_prompts=True),
                       processor=processor)
    assert len(kept) == 1 and kept[0]["extra_info"]["index"] == 10


def test_video_column_is_read_through_data_video_key(tmp_path, vlm):
    """Videos themselves: tests/data/test_rl_dataset_video.py. Here: the column data.video_key names is read."""
    from verl.data.video import VideoError

    tokenizer, processor = vlm
    path = write_rows(tmp_path / "v.parquet", [{**make_row("<video>What happens?", index=0), "videos": ["a.mp4"]}])
    with pytest.raises(VideoError, match="row 0 column 'videos' \\(data.video_key\\) video 0: video file 'a.mp4'"):
        RLHFDataset(path, tokenizer, config(), processor=processor)[0]
    assert torch.is_tensor(RLHFDataset(path, tokenizer, config(video_key="clips"), processor=processor)[0]["input_ids"])


def test_data_check_names_bad_image_rows_and_counts_image_tokens(tmp_path, vlm):
    from verl.data.data_check import RowNeeds, check_split

    tokenizer, processor = vlm
    rows = [make_row("<image>Count.", index=i) for i in range(5)]
    for row in rows:
        row["images"] = [{"bytes": png(), "path": None}]
    rows[1]["images"] = [{"bytes": None, "path": str(tmp_path / "missing.png")}]
    rows[2]["images"] = [{"bytes": b"not an image", "path": None}]
    rows[3]["prompt"] = [{"role": "user", "content": "<image><image>Count."}]
    rows[4]["images"] = [{"bytes": png((64, 64)), "path": None}]  # resized to 32x32: 16 image tokens, not 4
    path = write_rows(tmp_path / "check.parquet", rows)
    needs = RowNeeds(has_scorer=lambda source: True)
    limit = int(RLHFDataset(path, tokenizer, config(), processor=processor)[0]["attention_mask"].sum()) + 6
    report = check_split("data.train_files", [path], config(max_prompt_length=limit), tokenizer, needs,
                         processor=processor)
    text = "\n".join(report.problems)
    assert "2 rows have a missing or unreadable image in column 'images' (data.image_key): check.parquet rows 1 (" in text
    assert "missing.png' does not exist" in text and "not a readable image" in text
    assert "1 rows have a different number of <image> placeholders than images in column 'images': " \
           "check.parquet row 3" in text
    assert f"1 of 5 prompts are longer than data.max_prompt_length={limit} tokens with the chat template applied and " \
           "image tokens counted: check.parquet row 4 (" in text
    # the same rows without a processor: refused as image data for a text model
    report = check_split("data.train_files", [path], config(), tokenizer, needs)
    assert any("no multi-modal processor" in p for p in report.problems)
