"""Tiny random Qwen2-VL / Qwen2.5-VL folders (config, weights, tokenizer with the vision tokens, a small PIL image
processor, a Qwen-VL chat template) for the vision-language tests. No downloads; CPU; deterministic."""

from __future__ import annotations

import json
import os

import torch

from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
PATCH = 4  # pixels per patch side (real models: 14)
MERGE = 2  # patches merged per side into one LM token
TEMPORAL = 2

VL_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}{{ '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{% elif part['type'] == 'video' %}{{ '<|vision_start|><|video_pad|><|vision_end|>' }}"
    "{% else %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def vl_tokenizer():
    """The tiny tokenizer (a copy: the cached one stays untouched) with Qwen-VL's vision tokens and chat template."""
    import copy

    tokenizer = copy.deepcopy(build_tiny_tokenizer())
    tokenizer.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    tokenizer.chat_template = VL_CHAT_TEMPLATE
    return tokenizer


def image_processor(min_pixels: int = 8 * 8, max_pixels: int = 32 * 32):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=TEMPORAL,
                                    size={"shortest_edge": min_pixels, "longest_edge": max_pixels})


def tiny_vlm_config(family: str = "qwen2_5_vl", tokenizer=None):
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig

    tokenizer = tokenizer or vl_tokenizer()
    ids = {name: tokenizer.convert_tokens_to_ids(name) for name in VISION_TOKENS}
    text = dict(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rope_scaling={"type": "mrope", "mrope_section": [2, 1, 1]}, tie_word_embeddings=True,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                bos_token_id=tokenizer.bos_token_id)
    vision = dict(depth=1, hidden_size=16, num_heads=2, in_chans=3, patch_size=PATCH, spatial_merge_size=MERGE,
                  temporal_patch_size=TEMPORAL)
    if family == "qwen3_vl":
        from transformers import Qwen3VLConfig

        # Qwen3-VL: interleaved mrope over head_dim/2 = 4 pairs, a learned position table, deepstack features
        text.update(head_dim=8, rope_parameters={"rope_type": "default", "mrope_section": [2, 1, 1],
                                                 "mrope_interleaved": True, "rope_theta": 10000.0})
        text.pop("rope_scaling")
        text.pop("tie_word_embeddings")
        vision.update(hidden_size=16, intermediate_size=32, out_hidden_size=32, num_position_embeddings=16,
                      deepstack_visual_indexes=[0])
        cls = Qwen3VLConfig
    elif family == "qwen2_5_vl":
        vision.update(intermediate_size=32, out_hidden_size=32, fullatt_block_indexes=[0], window_size=16)
        cls = Qwen2_5_VLConfig
    else:
        vision.update(embed_dim=16, mlp_ratio=2, hidden_size=32)
        cls = Qwen2VLConfig
    config = cls(text_config=text, vision_config=vision, image_token_id=ids["<|image_pad|>"],
                 video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                 vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=True,
                 bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                 pad_token_id=tokenizer.pad_token_id)
    config._attn_implementation = "eager"
    return config


def tiny_vlm(family: str = "qwen2_5_vl", seed: int = 0):
    from transformers import (
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLForConditionalGeneration,
        Qwen3VLForConditionalGeneration,
    )

    torch.manual_seed(seed)
    cls = {"qwen2_5_vl": Qwen2_5_VLForConditionalGeneration, "qwen3_vl": Qwen3VLForConditionalGeneration}.get(
        family, Qwen2VLForConditionalGeneration)
    return cls(tiny_vlm_config(family)).float().eval()


def save_tiny_vlm_dir(folder, family: str = "qwen2_5_vl", seed: int = 0) -> str:
    """Weights, config, tokenizer, preprocessor_config.json and chat template: a folder `load_processor` and
    AutoModelForImageTextToText read like a real Qwen-VL checkpoint's."""
    folder = str(folder)
    tiny_vlm(family, seed).save_pretrained(folder)
    tokenizer = vl_tokenizer()
    tokenizer.save_pretrained(folder)
    processor_cls = {"qwen2_5_vl": "Qwen2_5_VLProcessor", "qwen3_vl": "Qwen3VLProcessor"}.get(family,
                                                                                          "Qwen2VLProcessor")
    config = image_processor().to_dict()
    config["processor_class"] = processor_cls
    config["image_processor_type"] = "Qwen2VLImageProcessor"
    with open(os.path.join(folder, "preprocessor_config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=1)
    with open(os.path.join(folder, "chat_template.json"), "w", encoding="utf-8") as handle:
        json.dump({"chat_template": VL_CHAT_TEMPLATE}, handle)
    return folder


def png(size=(16, 16), color=(255, 0, 0)) -> bytes:
    """A one-colour PNG, as a dataset's `images` column holds it ({"bytes": ...})."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, format="PNG")
    return buffer.getvalue()


def image_rows(prompt_images, question: str = "How many?") -> list[dict]:
    """Dataset rows, row i with `prompt_images[i]` images of different sizes (a row may hold none)."""
    from tests.data.conftest import make_row

    rows = []
    for i, count in enumerate(prompt_images):
        row = make_row("<image>" * count + question + " more" * i, index=i)
        row["images"] = [{"bytes": png((8 + 8 * k, 16 + 4 * i), (40 * i, 20 * k, 90)), "path": None}
                         for k in range(count)]
        rows.append(row)
    return rows


def collate_rows(folder: str, parquet, rows: list[dict], **data):
    """The collated RLHFDataset batch of `rows` (written to `parquet`) with the folder's tokenizer and processor;
    `data`: DataConfig fields beyond max_prompt_length=64, shuffle=False."""
    from tests.data.conftest import write_rows
    from verl.data import RLHFDataset, collate_fn
    from verl.models.loader import load_tokenizer
    from verl.models.processor import load_processor
    from verl.trainer.config import DataConfig

    tokenizer = load_tokenizer(folder, "model.path")
    processor = load_processor(folder, tokenizer, "model.path")
    dataset = RLHFDataset(write_rows(parquet, rows), tokenizer,
                          DataConfig(**{"max_prompt_length": 64, "shuffle": False, **data}), processor=processor)
    return collate_fn([dataset[i] for i in range(len(rows))]), tokenizer, processor


def collated_vlm_prompts(tmp_path, family: str, prompt_images=(1, 2, 0, 1)):
    """A tiny VLM folder under tmp_path and the collated dataset batch of `image_rows(prompt_images)`, with the
    folder's tokenizer and processor."""
    folder = save_tiny_vlm_dir(tmp_path / family, family)
    return collate_rows(folder, tmp_path / f"{family}.parquet", image_rows(prompt_images))


def plain_row_inputs(data, row: int, image_token_id: int) -> dict:
    """A plain HF forward's inputs for one row of a VLM batch: its real tokens alone (no padding, the model computing
    its own rope positions) with its images."""
    mask = data.batch["attention_mask"][row].bool()
    ids = data.batch["input_ids"][row][mask][None]
    inputs = data.non_tensor_batch["multi_modal_inputs"][row]
    return {"input_ids": ids, "mm_token_type_ids": (ids == image_token_id).int(),
            **{k: inputs[k] for k in ("pixel_values", "image_grid_thw") if k in inputs}}
