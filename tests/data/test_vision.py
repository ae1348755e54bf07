"""verl.data.vision: images from rows, placeholders, and mrope position ids against transformers' own."""

from __future__ import annotations

import io

import pytest
import torch
from PIL import Image

from tests.helpers.tiny_vlm import image_processor, tiny_vlm, vl_tokenizer
from verl.data.vision import (
    ImageError,
    load_image,
    mrope_position_ids,
    response_position_ids,
    split_placeholders,
    vision_position_ids,
)


def png_bytes(size=(12, 20), color=(0, 128, 255)) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def test_load_image_from_bytes_path_and_errors_name_the_place(tmp_path):
    assert load_image({"bytes": png_bytes()}, "row 0").size == (12, 20)
    path = tmp_path / "a.png"
    path.write_bytes(png_bytes((5, 6)))
    assert load_image({"path": str(path), "bytes": None}, "row 0").size == (5, 6)
    assert load_image(str(path), "row 0").mode == "RGB"
    with pytest.raises(ImageError, match="row 3 column 'images'.*does not exist"):
        load_image({"path": str(tmp_path / "gone.png")}, "row 3 column 'images'")
    with pytest.raises(ImageError, match="row 4: not a readable image"):
        load_image({"bytes": b"not a png"}, "row 4")
    with pytest.raises(ImageError, match="needs 'bytes' or 'path'"):
        load_image({"url": "x"}, "row 5")


def test_split_placeholders_keeps_text_and_order():
    messages = split_placeholders([{"role": "user", "content": "<image>Count the shapes in <image> please."}])
    assert messages[0]["content"] == [{"type": "image"}, {"type": "text", "text": "Count the shapes in "},
                                      {"type": "image"}, {"type": "text", "text": " please."}]


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_mrope_ids_equal_transformers_get_rope_index_with_left_padding(family):
    from verl.models.processor import image_only_processor

    tokenizer = vl_tokenizer()
    from transformers import Qwen2_5_VLProcessor, Qwen2VLProcessor

    cls = Qwen2_5_VLProcessor if family == "qwen2_5_vl" else Qwen2VLProcessor
    processor = image_only_processor(cls, image_processor(), tokenizer, tokenizer.chat_template)
    messages = split_placeholders([{"role": "user", "content": "a <image> b c <image> d"}])
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    images = [Image.new("RGB", (16, 24)), Image.new("RGB", (40, 8))]
    out = processor(text=[text], images=images, return_tensors="pt")
    pad = 5
    ids = torch.cat([torch.full((1, pad), tokenizer.pad_token_id), out["input_ids"]], dim=1)
    mask = torch.cat([torch.zeros(1, pad, dtype=torch.long), out["attention_mask"]], dim=1)
    types = torch.cat([torch.zeros(1, pad, dtype=out["mm_token_type_ids"].dtype), out["mm_token_type_ids"]], dim=1)
    model = tiny_vlm(family)
    expected, _ = model.model.get_rope_index(ids, mm_token_type_ids=types, image_grid_thw=out["image_grid_thw"],
                                             attention_mask=mask)
    ours = mrope_position_ids(ids[0], mask[0], out["image_grid_thw"], model.config.image_token_id, 2)
    valid = mask[0].bool()
    assert torch.equal(ours[:, valid], expected[:, 0, valid])
    full = vision_position_ids(ids[0], mask[0], out["image_grid_thw"], model.config.image_token_id, 2)
    assert full.shape == (4, ids.size(1))
    assert full[0, valid].tolist() == list(range(int(valid.sum())))


def test_response_positions_continue_every_axis():
    prompt = torch.tensor([[[0, 1, 2], [0, 1, 5], [0, 3, 5], [0, 2, 5]]])  # (1, 4, 3)
    assert response_position_ids(prompt, 2).tolist() == [[[3, 4], [6, 7], [6, 7], [6, 7]]]
    assert response_position_ids(torch.tensor([[0, 0, 1]]), 3).tolist() == [[2, 3, 4]]
