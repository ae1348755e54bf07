"""Image-text SFT samples: the RL image rows' format (``<image>`` placeholders in the messages, a ``data.image_key``
column of ``{"bytes": ...}`` / ``{"path": ...}`` entries) turned into training items, as upstream's
MultiTurnSFTDataset makes them with a processor.

A dataset renders its sample as (text, trained) pieces with the processor's chat template (the messages' string
contents split into typed parts by ``verl.data.vision.split_placeholders``). Each piece goes through the processor
with the images its placeholders name, so every image token is expanded to the image's t*h*w / merge**2 vision
tokens exactly as a whole-conversation call would, and the trained mask stays aligned with the pieces. Vision tokens
are never trained (they are inputs, not text the model writes), even inside an assistant turn.

An item holds ``input_ids``, ``attention_mask``, ``loss_mask`` (the SFT datasets' convention), ``position_ids`` of
shape (4, max_length) (text positions, then the three mrope rows; ``verl.data.vision.vision_position_ids``) and,
when the row has images, ``pixel_values`` / ``image_grid_thw`` — upstream's item keys. Videos (``<video>``
placeholders, the ``data.video_key`` column, read by ``verl.data.video``; Qwen2-VL / Qwen2.5-VL / Qwen3-VL) go the
same way and add ``pixel_values_videos`` / ``video_grid_thw`` (/ ``second_per_grid_ts``). ``collate_sft_batch`` keeps
those per row in a ``multi_modal_inputs`` list, since rows hold different numbers of images (or none).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import default_collate

from verl.data.rl_vision import check_media_columns, video_position_kwargs
from verl.data.video import row_videos
from verl.data.vision import count_placeholders, load_image, split_placeholders, vision_position_ids

__all__ = ["IMAGE_INPUT_KEYS", "MULTI_MODAL_INPUTS", "VisionSFTEncoder", "VisionSampleTooLongError", "row_images",
           "check_placeholder_count", "collate_sft_batch", "uses_images", "vision_forward_kwargs", "row_videos"]

# the processor outputs an item carries for the model's forward (upstream's item keys), images then videos
IMAGE_INPUT_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")
# the collated batch's per-row list of {pixel_values, image_grid_thw} ({} for a row without images)
MULTI_MODAL_INPUTS = "multi_modal_inputs"


class VisionSampleTooLongError(ValueError):
    """An image sample does not fit data.max_length and cannot be cut without cutting an image."""


def uses_images(column_names: Sequence[str], files: Sequence[str], config: Any, processor: Any) -> bool:
    """Whether the files' rows carry images or videos for ``processor``. Refuses them for a text-only model folder,
    and videos for a folder without a video processor, each naming its key."""
    return check_media_columns(list(column_names), list(files), config, processor)


def row_images(value: Any, image_key: str, row: int) -> list[Any]:
    """The row's images as PIL RGB images; a bad entry raises ImageError naming the row and the column."""
    if value is None:
        return []
    if isinstance(value, dict):  # one entry instead of a list of them
        value = [value]
    where = f"row {row} column {image_key!r} (data.image_key)"
    return [load_image(entry, f"{where} image {i}") for i, entry in enumerate(list(value))]


def check_placeholder_count(messages: Sequence[dict], images: Sequence[Any], image_key: str, row: int,
                            videos: Sequence[Any] = (), video_key: str | None = None) -> None:
    placeholders = count_placeholders([dict(m) for m in messages])
    if placeholders != len(images):
        raise ValueError(f"row {row}: the messages hold {placeholders} <image> placeholders but column {image_key!r} "
                         f"(data.image_key) holds {len(images)} images; they must match one to one, in order")
    placeholders = count_placeholders([dict(m) for m in messages], "<video>")
    if placeholders != len(videos):
        raise ValueError(f"row {row}: the messages hold {placeholders} <video> placeholders but column {video_key!r} "
                         f"(data.video_key) holds {len(videos)} videos; they must match one to one, in order")


class VisionSFTEncoder:
    """Turns a sample's rendered (text, trained) pieces and its images into token ids, trained flags and the
    processor's image inputs; the dataset pads them (``pad_right``) and adds ``position_ids``."""

    def __init__(self, processor: Any, max_length: int, truncation: str, pad_token_id: int) -> None:
        self.processor = processor
        self.max_length = max_length
        self.truncation = truncation
        self.pad_token_id = pad_token_id
        self.image_token = processor.image_token
        self.image_token_id = int(processor.image_token_id)
        self.merge_size = int(processor.image_processor.merge_size)
        video_token_id = getattr(processor, "video_token_id", None)
        self.video_token = getattr(processor, "video_token", None)
        self.vision_token_ids = {self.image_token_id} | ({int(video_token_id)} if video_token_id is not None else set())

    @staticmethod
    def typed_messages(messages: Sequence[dict]) -> list[dict]:
        """Messages whose ``<image>`` placeholders became the image parts the processor's chat template renders."""
        return split_placeholders([dict(m) for m in messages])

    def _piece_videos(self, text: str, videos: Sequence[Any], used: int, row: int) -> dict[str, Any]:
        count = text.count(self.video_token) if self.video_token else 0
        if used + count > len(videos):
            raise ValueError(f"row {row}: the rendered conversation holds more video tokens than its {len(videos)} "
                             f"videos (does the text itself contain {self.video_token!r}?)")
        clips = list(videos[used:used + count])
        if not clips:
            return {}
        return {"videos": [c[0] for c in clips], "video_metadata": [c[1] for c in clips], "do_sample_frames": False}

    def _encode(self, pieces: Sequence[tuple[str, bool]], images: Sequence[Any], row: int,
                videos: Sequence[Any] = ()) -> tuple[list[int], list[int], dict[str, torch.Tensor]]:
        ids: list[int] = []
        trained: list[int] = []
        outputs: dict[str, list[torch.Tensor]] = {key: [] for key in IMAGE_INPUT_KEYS}
        used = used_videos = 0
        for text, is_trained in pieces:
            count = text.count(self.image_token)
            if used + count > len(images):
                raise ValueError(f"row {row}: the rendered conversation holds more image tokens than its "
                                 f"{len(images)} images (does the text itself contain {self.image_token!r}?)")
            media = self._piece_videos(text, videos, used_videos, row)
            out = self.processor(text=[text], images=list(images[used:used + count]) or None, return_tensors="pt",
                                 add_special_tokens=False, **media)
            used += count
            used_videos += len(media.get("videos", ()))
            piece = out["input_ids"][0].tolist()
            ids.extend(piece)
            # vision tokens are inputs, never targets, even in an assistant turn
            trained.extend(int(is_trained and token not in self.vision_token_ids) for token in piece)
            for key in IMAGE_INPUT_KEYS:
                if out.get(key) is not None:
                    outputs[key].append(out[key])
        if used != len(images) or used_videos != len(videos):
            raise ValueError(f"row {row}: the chat template rendered {used} of the row's {len(images)} images and "
                             f"{used_videos} of its {len(videos)} videos; every <image> / <video> placeholder must sit "
                             "in a message's string content")
        return ids, trained, {key: torch.cat([torch.as_tensor(p) for p in parts]) for key, parts in outputs.items()
                              if parts}

    def _fit(self, ids: list[int], trained: list[int], row: int) -> tuple[list[int], list[int]]:
        """Cut to data.max_length like the text datasets, but never through an image (its pixel values would no
        longer match its tokens)."""
        excess = len(ids) - self.max_length
        if excess <= 0:
            return ids, trained
        image_at = [i for i, token in enumerate(ids) if token in self.vision_token_ids]
        if self.truncation == "left":  # drops ids[:excess]
            keeps_images = not image_at or image_at[0] >= excess
        elif self.truncation == "right":  # drops ids[max_length:]
            keeps_images = not image_at or image_at[-1] < self.max_length
        else:
            raise VisionSampleTooLongError(
                f"sample {row} has {len(ids)} tokens with its image tokens, more than data.max_length="
                f"{self.max_length}. Raise data.max_length, or set data.truncation to left or right (a cut may not "
                "reach an image).")
        if not keeps_images:
            raise VisionSampleTooLongError(
                f"sample {row} has {len(ids)} tokens with its image tokens, more than data.max_length="
                f"{self.max_length}, and data.truncation={self.truncation} would cut through an image. Raise "
                "data.max_length (or lower the processor's max_pixels so images take fewer tokens).")
        if self.truncation == "left":
            return ids[excess:], trained[excess:]
        return ids[:self.max_length], trained[:self.max_length]

    def encode(self, pieces: Sequence[tuple[str, bool]], images: Sequence[Any], row: int,
               videos: Sequence[Any] = ()) -> tuple[list[int], list[int], dict[str, torch.Tensor]]:
        """(token ids, trained flags, {pixel_values, image_grid_thw, video inputs}) of a sample, cut to
        data.max_length. ``videos``: (frames, metadata) pairs (``verl.data.video``)."""
        ids, trained, inputs = self._encode(pieces, images, row, videos)
        ids, trained = self._fit(ids, trained, row)
        return ids, trained, inputs

    def position_ids(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                     inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(4, L) positions of a right-padded sample. After a left cut they start at 0 again: every axis shifts by
        the same amount, so attention (which sees position differences only) is unchanged."""
        return vision_position_ids(input_ids, attention_mask, inputs.get("image_grid_thw"), self.image_token_id,
                                   self.merge_size, **video_position_kwargs(self.processor, inputs))


def collate_sft_batch(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Stack the items' tensors; rows with images keep their ``pixel_values`` / ``image_grid_thw`` in a per-row
    ``multi_modal_inputs`` list (rows differ in image count and size, so they cannot be stacked)."""
    per_row = [{key: item[key] for key in IMAGE_INPUT_KEYS if item.get(key) is not None} for item in items]
    batch = default_collate([{k: v for k, v in item.items() if k not in IMAGE_INPUT_KEYS} for item in items])
    if any(per_row):
        batch[MULTI_MODAL_INPUTS] = per_row
    return batch


def vision_forward_kwargs(batch: dict[str, Any]) -> dict[str, torch.Tensor]:
    """``pixel_values`` / ``image_grid_thw`` of a (micro-)batch's rows, concatenated in row order: the order of the
    image tokens in its input_ids, padded or packed. {} for a batch without images."""
    rows = batch.get(MULTI_MODAL_INPUTS)
    if not rows:
        return {}
    device = batch["input_ids"].device
    kwargs = {}
    for key in IMAGE_INPUT_KEYS:
        parts = [torch.as_tensor(row[key]) for row in rows if row.get(key) is not None]
        if parts:
            kwargs[key] = torch.cat(parts).to(device)
    return kwargs
