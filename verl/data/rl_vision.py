"""One vision-language RL row -> the prompt tensors and the multi-modal payload, as upstream's RLHFDataset makes them.

With a processor (the model folder's, ``verl.models.processor``) and the ``data.image_key`` column present:
- the prompt's ``<image>`` placeholders become image parts of the messages, rendered by the processor's chat
  template; the processor expands each into the image's vision tokens (t*h*w / merge**2 of them);
- ``multi_modal_data`` = {"image": [PIL images]} (what a rollout engine takes), ``multi_modal_inputs`` = {pixel_values,
  image_grid_thw} (what the actor's forward takes; with ``data.return_multi_modal_inputs``);
- ``position_ids`` (4, max_prompt_length): text positions and the three mrope rows (``verl.data.vision``);
- ``raw_prompt_ids``: the rendered prompt with one image token per image (engines expand it themselves).
A vision prompt cannot be cut without breaking its images: longer than data.max_prompt_length (image tokens
counted) is refused whatever data.truncation says; data.filter_overlong_prompts drops such rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from verl.data.prompt_ids import PromptTooLongError, left_pad
from verl.data.vision import ImageError, load_image, split_placeholders, vision_position_ids

__all__ = ["VisionPrompt", "render_vision_prompt", "vision_prompt_length", "check_media_columns"]


@dataclass
class VisionPrompt:
    text: str  # the rendered prompt (one image token per image)
    images: list[Any]  # PIL RGB
    inputs: dict[str, torch.Tensor]  # the processor's output for one row


def _images_of(row: dict[str, Any], image_key: str, row_index: int) -> list[Any]:
    value = row.get(image_key)
    if value is None:
        return []
    if isinstance(value, dict):  # a single entry instead of a list
        value = [value]
    where = f"row {row_index} column {image_key!r} (data.image_key)"
    return [load_image(entry, f"{where} image {i}") for i, entry in enumerate(list(value))]


def render_vision_prompt(processor: Any, messages: list[dict[str, Any]], row: dict[str, Any], image_key: str,
                         row_index: int, template_kwargs: dict[str, Any] | None = None) -> VisionPrompt:
    """Render and process one row; raises ImageError / ValueError naming the row for bad images or a
    placeholder count that differs from the number of images."""
    images = _images_of(row, image_key, row_index)
    parts = split_placeholders(messages)
    placeholders = sum(1 for m in parts if isinstance(m["content"], list) for p in m["content"] if p["type"] == "image")
    if placeholders != len(images):
        raise ValueError(f"row {row_index}: the prompt has {placeholders} <image> placeholders but column "
                         f"{image_key!r} (data.image_key) holds {len(images)} images; they must match one to one")
    text = processor.apply_chat_template(parts, add_generation_prompt=True, tokenize=False, **(template_kwargs or {}))
    inputs = processor(text=[text], images=images or None, return_tensors="pt")
    return VisionPrompt(text=text, images=images, inputs=dict(inputs))


def vision_prompt_length(processor: Any, messages: list[dict[str, Any]], row: dict[str, Any], image_key: str,
                         row_index: int, template_kwargs: dict[str, Any] | None = None) -> int:
    """Prompt tokens with every image's vision tokens counted (what must fit data.max_prompt_length)."""
    prompt = render_vision_prompt(processor, messages, row, image_key, row_index, template_kwargs)
    return int(prompt.inputs["input_ids"].size(1))


def vision_item(processor: Any, tokenizer: Any, messages: list[dict[str, Any]], row: dict[str, Any], config: Any,
                row_index: int, pad_token_id: int) -> dict[str, Any]:
    """The item fields of a vision row (input_ids, attention_mask, position_ids, raw_prompt_ids, multi_modal_data,
    multi_modal_inputs); ``row`` loses its image column."""
    prompt = render_vision_prompt(processor, messages, row, config.image_key, row_index,
                                  dict(getattr(config, "apply_chat_template_kwargs", None) or {}))
    row.pop(config.image_key, None)
    ids = prompt.inputs.pop("input_ids")[0]
    prompt.inputs.pop("attention_mask", None)
    prompt.inputs.pop("mm_token_type_ids", None)  # recomputed from the ids where needed
    if ids.numel() > config.max_prompt_length:
        raise PromptTooLongError(
            f"prompt of row {row_index} has {ids.numel()} tokens with its image tokens, longer than "
            f"data.max_prompt_length={config.max_prompt_length}; an image prompt cannot be truncated. Raise "
            "data.max_prompt_length, or set data.filter_overlong_prompts=True to drop such rows.")
    input_ids, attention_mask = left_pad(ids.tolist(), config.max_prompt_length, pad_token_id)
    grid = prompt.inputs.get("image_grid_thw")
    merge = int(getattr(processor.image_processor, "merge_size", 0) or 0)
    image_token_id = getattr(processor, "image_token_id", None)
    if merge and image_token_id is not None:
        position_ids = vision_position_ids(input_ids, attention_mask, grid, int(image_token_id), merge)
    else:
        position_ids = (torch.cumsum(attention_mask, -1) - 1).clamp(min=0) * attention_mask
    item: dict[str, Any] = {
        "input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
        "raw_prompt_ids": tokenizer.encode(prompt.text, add_special_tokens=False),
        "multi_modal_data": {"image": prompt.images},
    }
    if config.return_multi_modal_inputs:
        item["multi_modal_inputs"] = {k: v for k, v in prompt.inputs.items() if isinstance(v, torch.Tensor)}
    return item


def check_media_columns(column_names: list[str], files: list[str], config: Any, processor: Any) -> bool:
    """Whether the rows carry images for the processor; refuses videos and images without a processor."""
    if config.video_key in column_names:
        raise NotImplementedError(
            f"{files}: column {config.video_key!r} (data.video_key) holds videos; video inputs are not built in this "
            "verl (the Qwen-VL video processors need torchvision, which has no CPU build for Linux on PyPI). Drop "
            "the column, or set data.video_key to a column name the files do not have.")
    if config.image_key not in column_names:
        return False
    if processor is None:
        raise NotImplementedError(
            f"{files}: column {config.image_key!r} (data.image_key) holds images, but the model folder has no "
            "multi-modal processor (a text-only model would silently train on the text alone). Use a "
            "vision-language model (Qwen2-VL / Qwen2.5-VL), or drop the column.")
    return True


__all__ += ["vision_item", "ImageError"]
