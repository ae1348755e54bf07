"""Tiny random Qwen2-VL / Qwen2.5-VL / Qwen3-VL folders that vLLM's CPU build accepts, for the vLLM vision tests.

``tests/helpers/tiny_vlm.py``'s models have a text head size of 8; vLLM's CPU attention takes head sizes of 32 and
up, so this variant widens the text model (2 heads of 32) and scales the mrope sections with it (they split
head_dim / 2 rotary frequencies between time, height and width). Everything else (vision tower, tokenizer, image
processor with patch 4 / merge 2, chat template) is the same folder ``save_tiny_vlm_dir`` writes.
"""

from __future__ import annotations

import os

import torch

from tests.helpers.tiny_vlm import save_tiny_vlm_dir, tiny_vlm_config

TEXT_HIDDEN = 64
TEXT_HEADS = 2  # head_dim 32: the smallest vLLM's CPU attention takes
MROPE_SECTION = [8, 4, 4]  # sums to head_dim / 2


def tiny_vllm_vlm_config(family: str = "qwen2_5_vl"):
    config = tiny_vlm_config(family)
    text = config.text_config
    text.hidden_size = TEXT_HIDDEN
    text.intermediate_size = 2 * TEXT_HIDDEN
    text.num_attention_heads = TEXT_HEADS
    text.num_key_value_heads = TEXT_HEADS
    text.head_dim = TEXT_HIDDEN // TEXT_HEADS
    text.max_position_embeddings = 2048  # vLLM holds max_model_len to it: room for tool-turn trajectories
    rope = dict(getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None) or {})
    rope["mrope_section"] = list(MROPE_SECTION)
    if hasattr(text, "rope_parameters"):
        text.rope_parameters = rope
    else:
        text.rope_scaling = rope
    # the vision merger projects into the language model's width
    vision = config.vision_config
    if family in ("qwen2_5_vl", "qwen3_vl"):
        vision.out_hidden_size = TEXT_HIDDEN
    else:
        vision.hidden_size = TEXT_HIDDEN
    return config


def tiny_vllm_vlm(family: str = "qwen2_5_vl", seed: int = 0, initializer_range: float = 0.2):
    """The model in fp32; ``initializer_range`` larger than HF's 0.02 so greedy decoding varies with the input
    (and with the image)."""
    from transformers import (
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLForConditionalGeneration,
        Qwen3VLForConditionalGeneration,
    )

    torch.manual_seed(seed)
    config = tiny_vllm_vlm_config(family)
    config.initializer_range = initializer_range
    config.text_config.initializer_range = initializer_range
    cls = {"qwen2_5_vl": Qwen2_5_VLForConditionalGeneration, "qwen3_vl": Qwen3VLForConditionalGeneration}.get(
        family, Qwen2VLForConditionalGeneration)
    return cls(config).float().eval()


def save_tiny_vllm_vlm_dir(folder, family: str = "qwen2_5_vl", seed: int = 0) -> str:
    """``save_tiny_vlm_dir``'s folder (tokenizer, processor files, chat template) with this module's wider model."""
    folder = str(folder)
    save_tiny_vlm_dir(folder, family, seed)
    for name in os.listdir(folder):
        if name.endswith(".safetensors") or name == "config.json":
            os.remove(os.path.join(folder, name))
    tiny_vllm_vlm(family, seed).save_pretrained(folder)
    return folder


def collated_vllm_vlm_prompts(tmp_path, family: str, prompt_images=(1, 2, 0, 1)):
    """``collated_vlm_prompts``'s rows (``prompt_images[i]`` images of different sizes in row i) on a folder from
    ``save_tiny_vllm_vlm_dir``: the collated dataset batch, the folder, its tokenizer and its processor."""
    from tests.helpers.tiny_vlm import collate_rows, image_rows

    folder = save_tiny_vllm_vlm_dir(tmp_path / family, family)
    batch, tokenizer, processor = collate_rows(folder, tmp_path / f"{family}.parquet", image_rows(prompt_images))
    return batch, folder, tokenizer, processor
