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

Videos (the ``data.video_key`` column, ``<video>`` placeholders; Qwen2-VL / Qwen2.5-VL / Qwen3-VL) go the same way: each
entry is read and sampled by ``verl.data.video``, ``multi_modal_data["video"]`` holds (frames, metadata) pairs and
``multi_modal_inputs`` the processor's ``pixel_values_videos`` / ``video_grid_thw`` (and Qwen2.5-VL's
``second_per_grid_ts``, which its 3-D positions use).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from verl.data.image_resize import fit_image_to_patches, patch_size_for
from verl.data.prompt_ids import PromptTooLongError, left_pad
from verl.data.video import row_videos
from verl.data.vision import ImageError, load_image, split_placeholders, vision_position_ids

__all__ = ["VisionPrompt", "render_vision_prompt", "vision_prompt_length", "check_media_columns"]


@dataclass
class VisionPrompt:
    text: str  # the rendered prompt (one image token per image)
    images: list[Any]  # PIL RGB
    inputs: dict[str, torch.Tensor]  # the processor's output for one row
    videos: list[Any] = ()  # (uint8 frames (T, 3, H, W), metadata) per video


def _images_of(row: dict[str, Any], image_key: str, row_index: int, patch_size: int | None = None) -> list[Any]:
    value = row.get(image_key)
    if value is None:
        return []
    if isinstance(value, dict):  # a single entry instead of a list
        value = [value]
    where = f"row {row_index} column {image_key!r} (data.image_key)"
    images = [load_image(entry, f"{where} image {i}") for i, entry in enumerate(list(value))]
    if patch_size is None:
        return images
    # data.image_patch_size: sides to multiples of patch * merge, as upstream (verl.data.image_resize)
    return [fit_image_to_patches(image, patch_size, entry) for image, entry in zip(images, list(value), strict=True)]


def _count_parts(parts: list[dict[str, Any]], kind: str) -> int:
    return sum(1 for m in parts if isinstance(m["content"], list) for p in m["content"] if p["type"] == kind)


def render_vision_prompt(processor: Any, messages: list[dict[str, Any]], row: dict[str, Any], image_key: str,
                         row_index: int, template_kwargs: dict[str, Any] | None = None,
                         video_key: str | None = None, image_patch_size: int | None = None) -> VisionPrompt:
    """Render and process one row; raises ImageError (VideoError) / ValueError naming the row for bad images or
    videos, or a placeholder count that differs from them. ``image_patch_size`` (data.image_patch_size): resize the
    images for it first (None: as they are)."""
    patch_size = patch_size_for(processor, image_patch_size)
    images = _images_of(row, image_key, row_index, patch_size)
    videos = row_videos(row.get(video_key), video_key, row_index, processor, patch_size) if video_key else []
    parts = split_placeholders(messages)
    placeholders = _count_parts(parts, "image")
    if placeholders != len(images):
        raise ValueError(f"row {row_index}: the prompt has {placeholders} <image> placeholders but column "
                         f"{image_key!r} (data.image_key) holds {len(images)} images; they must match one to one")
    video_placeholders = _count_parts(parts, "video")
    if video_placeholders != len(videos):
        raise ValueError(f"row {row_index}: the prompt has {video_placeholders} <video> placeholders but column "
                         f"{video_key!r} (data.video_key) holds {len(videos)} videos; they must match one to one")
    text = processor.apply_chat_template(parts, add_generation_prompt=True, tokenize=False, **(template_kwargs or {}))
    media: dict[str, Any] = {"images": images or None}
    if videos:
        # frames arrive sampled (verl.data.video): a processor must not sample them again (transformers' Qwen3-VL
        # video processor would by default, where torchvision lets AutoProcessor build it)
        media.update(videos=[frames for frames, _ in videos], video_metadata=[meta for _, meta in videos],
                     do_sample_frames=False)
    inputs = processor(text=[text], return_tensors="pt", **media)
    return VisionPrompt(text=text, images=images, inputs=dict(inputs), videos=videos)


def vision_prompt_length(processor: Any, messages: list[dict[str, Any]], row: dict[str, Any], image_key: str,
                         row_index: int, template_kwargs: dict[str, Any] | None = None,
                         video_key: str | None = None, image_patch_size: int | None = None) -> int:
    """Prompt tokens with every image's and video's vision tokens counted (what must fit data.max_prompt_length)."""
    prompt = render_vision_prompt(processor, messages, row, image_key, row_index, template_kwargs, video_key,
                                  image_patch_size)
    return int(prompt.inputs["input_ids"].size(1))


def video_position_kwargs(processor: Any, inputs: dict[str, Any] | None) -> dict[str, Any]:
    """The video arguments of ``vision_position_ids`` for a row's processor outputs (none without videos)."""
    inputs = inputs or {}
    if inputs.get("video_grid_thw") is None:
        return {}
    video_processor = getattr(processor, "video_processor", None)
    grid = torch.as_tensor(inputs["video_grid_thw"]).reshape(-1, 3)
    if getattr(video_processor, "timestamps", False):
        # Qwen3-VL: a timestamp's text separates the temporal patches, so each is a block of its own (t = 1)
        grid = torch.repeat_interleave(grid, grid[:, 0], dim=0)
        grid[:, 0] = 1
        return {"video_grid_thw": grid, "video_token_id": getattr(processor, "video_token_id", None)}
    return {"video_grid_thw": grid, "video_token_id": getattr(processor, "video_token_id", None),
            "second_per_grid_ts": inputs.get("second_per_grid_ts"),
            "tokens_per_second": getattr(video_processor, "tokens_per_second", None)}


def vision_item(processor: Any, tokenizer: Any, messages: list[dict[str, Any]], row: dict[str, Any], config: Any,
                row_index: int, pad_token_id: int) -> dict[str, Any]:
    """The item fields of a vision row (input_ids, attention_mask, position_ids, raw_prompt_ids, multi_modal_data,
    multi_modal_inputs); ``row`` loses its image column."""
    prompt = render_vision_prompt(processor, messages, row, config.image_key, row_index,
                                  dict(getattr(config, "apply_chat_template_kwargs", None) or {}), config.video_key,
                                  getattr(config, "image_patch_size", None))
    row.pop(config.image_key, None)
    row.pop(config.video_key, None)
    ids = prompt.inputs.pop("input_ids")[0]
    prompt.inputs.pop("attention_mask", None)
    prompt.inputs.pop("mm_token_type_ids", None)  # recomputed from the ids where needed
    if ids.numel() > config.max_prompt_length:
        raise PromptTooLongError(
            f"prompt of row {row_index} has {ids.numel()} tokens with its "
            f"{'image and video' if prompt.videos else 'image'} tokens, longer than "
            f"data.max_prompt_length={config.max_prompt_length}; an image prompt cannot be truncated. Raise "
            "data.max_prompt_length, or set data.filter_overlong_prompts=True to drop such rows.")
    input_ids, attention_mask = left_pad(ids.tolist(), config.max_prompt_length, pad_token_id)
    grid = prompt.inputs.get("image_grid_thw")
    merge = int(getattr(processor.image_processor, "merge_size", 0) or 0)
    image_token_id = getattr(processor, "image_token_id", None)
    if merge and image_token_id is not None:
        position_ids = vision_position_ids(input_ids, attention_mask, grid, int(image_token_id), merge,
                                           **video_position_kwargs(processor, prompt.inputs))
    else:
        position_ids = (torch.cumsum(attention_mask, -1) - 1).clamp(min=0) * attention_mask
    item: dict[str, Any] = {
        "input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
        "raw_prompt_ids": tokenizer.encode(prompt.text, add_special_tokens=False),
        "multi_modal_data": {"image": prompt.images},
    }
    if prompt.videos:  # (frames as a uint8 tensor (T, 3, H, W), metadata) per video
        item["multi_modal_data"]["video"] = [(torch.from_numpy(frames), meta) for frames, meta in prompt.videos]
    if config.return_multi_modal_inputs:
        item["multi_modal_inputs"] = {k: v for k, v in prompt.inputs.items() if isinstance(v, torch.Tensor)}
    return item


def check_media_columns(column_names: list[str], files: list[str], config: Any, processor: Any) -> bool:
    """Whether the rows carry images or videos for the processor; refuses them without a processor, and videos for
    a processor without a video processor."""
    has_videos = bool(config.video_key) and config.video_key in column_names
    media = [key for key in (config.image_key, config.video_key if has_videos else None) if key in column_names]
    if not media:
        return False
    if processor is None:
        kind = "image" if media[0] == config.image_key else "video"
        raise NotImplementedError(
            f"{files}: column {media[0]!r} (data.{kind}_key) holds {kind}s, but the model folder has no multi-modal "
            "processor (a text-only model would silently train on the text alone). Use a vision-language model "
            "(Qwen2-VL / Qwen2.5-VL), or drop the column.")
    if has_videos and getattr(processor, "video_processor", None) is None:
        raise NotImplementedError(
            f"{files}: column {config.video_key!r} (data.video_key) holds videos, but {type(processor).__name__} has "
            "no video processor here: videos are built for Qwen2-VL / Qwen2.5-VL / Qwen3-VL folders. Drop the column, "
            "or use one of those models.")
    return True


__all__ += ["vision_item", "ImageError", "video_position_kwargs"]
