"""The multi-modal processor of a model folder, built here without torchvision (verl.models.processor)."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from tests.helpers.tiny_vlm import save_tiny_vlm_dir, tiny_vlm
from verl.models.loader import load_tokenizer
from verl.models.processor import load_processor, processor_class_name, torchvision_usable


@pytest.mark.parametrize("family,cls", [("qwen2_5_vl", "Qwen2_5_VLProcessor"), ("qwen2_vl", "Qwen2VLProcessor")])
def test_processor_from_folder_expands_images_and_feeds_the_model(tmp_path, family, cls):
    folder = save_tiny_vlm_dir(tmp_path, family)
    assert processor_class_name(folder) == cls
    tokenizer = load_tokenizer(folder, "actor_rollout_ref.model.path")
    processor = load_processor(folder, tokenizer, "actor_rollout_ref.model.path")
    assert type(processor).__name__ == cls and processor.tokenizer is tokenizer
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "How many?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text.count("<|image_pad|>") == 1
    out = processor(text=[text], images=[Image.new("RGB", (20, 28), (255, 0, 0))], return_tensors="pt")
    # 28x20 px -> 32x16 (multiples of patch*merge=8): 8x4 patches of 4 px, merged 2x2 into 8 LM tokens
    assert out["image_grid_thw"].tolist() == [[1, 8, 4]]
    image_id = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert int((out["input_ids"] == image_id).sum()) == 8
    assert out["pixel_values"].shape == (32, 3 * 2 * 4 * 4)
    with torch.no_grad():
        logits = tiny_vlm(family)(**out).logits
    assert logits.shape[:2] == out["input_ids"].shape and torch.isfinite(logits).all()


def test_text_only_folder_has_no_processor(tmp_path):
    from tests.helpers.tiny_model import save_tiny_model_dir

    folder = save_tiny_model_dir(tmp_path)
    assert load_processor(folder, load_tokenizer(folder, "k"), "actor_rollout_ref.model.path") is None


def test_auto_processor_fails_without_torchvision_so_the_image_only_path_is_needed(tmp_path):
    """The reason for the image-only path: scripts/setup.sh keeps torchvision out on CPU (PyPI's Linux wheels are
    CUDA builds that cannot load against the CPU torch), and transformers 5.16-5.19 then cannot build a Qwen-VL
    processor at all. When this starts passing AutoProcessor, the fallback can go."""
    if torchvision_usable():
        pytest.skip("torchvision imports here: load_processor uses AutoProcessor")
    from transformers import AutoProcessor

    folder = save_tiny_vlm_dir(tmp_path)
    with pytest.raises((AttributeError, ImportError)):  # a video processor needs torchvision
        AutoProcessor.from_pretrained(folder)


@pytest.mark.parametrize("family,cls", [("qwen2_vl", "Qwen2VLProcessor"), ("qwen3_vl", "Qwen3VLProcessor")])
def test_the_processor_saves_into_a_folder_it_loads_from_again(tmp_path, family, cls):
    """What a checkpoint's huggingface folder holds (the actor saves its processor there)."""
    folder = save_tiny_vlm_dir(tmp_path / "model", family)
    processor = load_processor(folder, load_tokenizer(folder, "model.path"), "model.path")
    processor.save_pretrained(tmp_path / "saved")
    saved = str(tmp_path / "saved")
    assert processor_class_name(saved) == cls
    again = load_processor(saved, load_tokenizer(saved, "saved"), "saved")
    assert type(again).__name__ == cls and again.chat_template == processor.chat_template
    image = Image.new("RGB", (20, 28), (0, 90, 0))
    for key in ("pixel_values", "image_grid_thw"):
        assert torch.equal(again.image_processor(images=[image], return_tensors="pt")[key],
                           processor.image_processor(images=[image], return_tensors="pt")[key])
