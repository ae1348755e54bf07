"""verl's torchvision-free Qwen video processor (verl.models.video_processor) inside the folder's processor."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from tests.helpers.tiny_video import frame, save_tiny_video_vlm_dir
from tests.helpers.tiny_vlm import tiny_vlm
from verl.data.rl_vision import video_position_kwargs
from verl.data.vision import mrope_position_ids
from verl.models.loader import load_tokenizer
from verl.models.processor import load_processor
from verl.models.video_processor import QwenVideoProcessor


def processor_of(tmp_path, family):
    folder = save_tiny_video_vlm_dir(tmp_path / family, family)
    return load_processor(folder, load_tokenizer(folder, "k"), "k")


def _transformers_layout(frames: np.ndarray, tp: int, p: int, m: int) -> np.ndarray:
    """transformers' Qwen2VLVideoProcessor.patchify written out for one (T, C, H, W) video: pad T with the last
    frame, view (t, tp, C, h/m, m, p, w/m, m, p), permute to (t, h/m, w/m, m, m, C, tp, p, p)."""
    video = torch.from_numpy(frames)[None]
    if pad := -video.shape[1] % tp:
        video = torch.cat([video, video[:, -1:].expand(-1, pad, -1, -1, -1)], dim=1)
    b, t, c, h, w = video.shape
    view = video.view(b, t // tp, tp, c, h // p // m, m, p, w // p // m, m, p)
    return view.permute(0, 1, 4, 7, 5, 8, 3, 2, 6, 9).reshape(t // tp * (h // p) * (w // p), c * tp * p * p).numpy()


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl"])
def test_two_copies_of_an_image_give_the_image_processors_patches(tmp_path, family):
    """transformers repeats a still image temporal_patch_size (2) times: a 2-frame video of it is the same."""
    processor = processor_of(tmp_path, family)
    assert isinstance(processor.video_processor, QwenVideoProcessor)
    image = Image.fromarray(np.random.RandomState(0).randint(0, 255, (28, 20, 3), dtype=np.uint8))
    as_image = processor.image_processor(images=[image], return_tensors="pt")
    as_video = processor.video_processor([[image, image]], return_tensors="pt")
    # 28x20 -> 32x16 (multiples of patch 4 * merge 2): 8x4 patches
    assert as_image["image_grid_thw"].tolist() == as_video["video_grid_thw"].tolist() == [[1, 8, 4]]
    assert torch.equal(as_image["pixel_values"], as_video["pixel_values_videos"])


def test_layout_padding_and_grid_match_transformers(tmp_path):
    processor = processor_of(tmp_path, "qwen2_vl").video_processor
    frames = np.stack([frame(i).transpose(2, 0, 1) for i in range(3)])  # 3 frames of 16x24: kept at 16x24
    out = processor([frames], return_tensors="pt")
    # 3 frames -> padded to 4 -> t=2; 16x24 px -> 4x6 patches of 4 px
    assert out["video_grid_thw"].tolist() == [[2, 4, 6]]
    assert out["pixel_values_videos"].shape == (2 * 4 * 6, 3 * 2 * 4 * 4)
    mean, std = np.array(processor.image_mean)[:, None, None], np.array(processor.image_std)[:, None, None]
    normalized = ((frames / 255.0 - mean) / std).astype(np.float32)
    expected = _transformers_layout(normalized, tp=2, p=4, m=2)
    np.testing.assert_allclose(out["pixel_values_videos"].numpy(), expected, atol=1e-5)
    # the first patch row: frame 0's top-left 4x4 pixels then frame 1's, per channel
    first = out["pixel_values_videos"][0].view(3, 2, 4, 4).numpy()
    np.testing.assert_allclose(first[:, 1], normalized[1, :, :4, :4], atol=1e-5)
    # (H, W, 3) frames, a tensor and a list of PIL frames read the same
    same = processor([torch.from_numpy(frames.transpose(0, 2, 3, 1).copy())], return_tensors="pt")
    assert torch.equal(same["pixel_values_videos"], out["pixel_values_videos"])
    pil = processor([[Image.fromarray(f.transpose(1, 2, 0)) for f in frames]], return_tensors="pt")
    assert torch.equal(pil["pixel_values_videos"], out["pixel_values_videos"])


def test_frames_are_resized_by_the_smart_resize_rule(tmp_path):
    processor = processor_of(tmp_path, "qwen2_vl").video_processor
    big = np.stack([np.full((3, 80, 40), 128, np.uint8)] * 2)  # 3200 px, more than max_pixels 1024
    out = processor([big], return_tensors="pt")
    # beta = sqrt(80*40/1024) = 1.768: h = floor(80/1.768/8)*8 = 40, w = floor(40/1.768/8)*8 = 16
    assert out["video_grid_thw"].tolist() == [[1, 10, 4]]


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_processor_expands_video_tokens_and_positions_equal_get_rope_index(tmp_path, family):
    processor = processor_of(tmp_path, family)
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"},
                                             {"type": "text", "text": "b"}, {"type": "video"},
                                             {"type": "text", "text": "what?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    frames = np.stack([frame(i) for i in range(6)])  # (T, H, W, 3): t = 3
    meta = {"fps": 4.0, "total_num_frames": 12, "frames_indices": [0, 2, 4, 6, 8, 10]}
    out = processor(text=[text], images=[Image.new("RGB", (16, 16))], videos=[frames], video_metadata=[meta],
                    return_tensors="pt")
    assert out["video_grid_thw"].tolist() == [[3, 4, 6]]
    assert int((out["input_ids"] == processor.video_token_id).sum()) == 3 * 4 * 6 // 4
    model = tiny_vlm(family)
    rope_kwargs = {}
    if family == "qwen2_5_vl":
        # sampled fps = 6 / 12 * 4 = 2: second_per_grid_ts = temporal_patch_size / 2 = 1
        assert out["second_per_grid_ts"].tolist() == [1.0]
        assert processor.video_processor.tokens_per_second == model.config.vision_config.tokens_per_second
        rope_kwargs = {"second_per_grid_ts": out["second_per_grid_ts"]}
    else:
        assert "second_per_grid_ts" not in out
    if family == "qwen3_vl":  # each temporal patch after its timestamp: frames (0, 2), (4, 6), (8, 10) at 4 fps
        decoded = processor.tokenizer.decode(out["input_ids"][0])
        assert "<0.2 seconds>" in decoded and "<1.2 seconds>" in decoded and "<2.2 seconds>" in decoded
    expected, _ = model.model.get_rope_index(out["input_ids"], mm_token_type_ids=out["mm_token_type_ids"],
                                             image_grid_thw=out["image_grid_thw"],
                                             video_grid_thw=out["video_grid_thw"], **rope_kwargs)
    ours = mrope_position_ids(out["input_ids"][0], out["attention_mask"][0], out["image_grid_thw"],
                              processor.image_token_id, 2, **video_position_kwargs(processor, out))
    assert torch.equal(ours, expected[:, 0])
    if family == "qwen2_5_vl":  # temporal positions spaced by tokens_per_second * second_per_grid_ts = 4
        video_at = (out["input_ids"][0] == processor.video_token_id).nonzero()[:, 0]
        assert sorted(set(ours[0, video_at].tolist()))[1] - sorted(set(ours[0, video_at].tolist()))[0] == 4
    with torch.no_grad():
        logits = model(**{k: v for k, v in out.items()}).logits
    assert torch.isfinite(logits).all()


def test_qwen3_vl_bounds_the_whole_clip_and_the_slot_survives_a_save(tmp_path):
    processor = processor_of(tmp_path, "qwen3_vl").video_processor
    assert processor.timestamps
    # 8 frames of 48x48: 18432 px > 8192 for the clip: beta = sqrt(18432 / 8192) = 1.5: floor(32 / 8) * 8 = 32
    out = processor([np.stack([frame(i, 48, 48) for i in range(8)])], return_tensors="pt")
    assert out["video_grid_thw"].tolist() == [[4, 8, 8]]
    saved = processor_of(tmp_path, "qwen2_5_vl")
    saved.save_pretrained(tmp_path / "saved")
    again = load_processor(str(tmp_path / "saved"), load_tokenizer(str(tmp_path / "saved"), "k"), "k")
    assert again.video_processor.to_dict() == saved.video_processor.to_dict()


def test_unapplied_settings_are_refused(tmp_path):
    processor = processor_of(tmp_path, "qwen2_vl").video_processor
    with pytest.raises(ValueError, match="do_sample_frames=True is not built"):
        processor([np.zeros((2, 16, 16, 3), np.uint8)], do_sample_frames=True)
    with pytest.raises(ValueError, match=r"settings \['fps'\] are not applied"):
        processor([np.zeros((2, 16, 16, 3), np.uint8)], fps=1)
