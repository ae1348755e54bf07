"""Images and videos through micro-batching: a VLM batch's per-row ``multi_modal_inputs`` (pixel_values /
image_grid_thw, pixel_values_videos / video_grid_thw / second_per_grid_ts; a non-tensor column of dicts) cannot be
split and shuffled with the tensors, so each row's number goes in the
TensorDict instead and every micro-batch looks its rows' images up by it. Shared by the actor and the critic."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

from verl.protocol import DataProto

__all__ = ["MM_ROW", "select_with_rows", "vision_kwargs", "hf_position_ids", "images_in_shard", "MEDIA_INPUT_KEYS"]

MM_ROW = "multi_modal_row"
# the model inputs a row's multi_modal_inputs may hold, concatenated over a micro-batch's rows in row order
MEDIA_INPUT_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


def select_with_rows(data: DataProto, keys: list[str]) -> tuple[DataProto, np.ndarray | None]:
    """``data`` restricted to ``keys`` (plus the row numbers when it carries images), and its image column."""
    selected = data.select(batch_keys=keys)
    column = data.non_tensor_batch.get("multi_modal_inputs")
    if column is not None:
        selected.batch[MM_ROW] = torch.arange(len(data), device=selected.batch.device)
    return selected, column


def images_in_shard(module: torch.nn.Module, packed: Any, shard: Any, images: dict[str, torch.Tensor]):
    """The context a Ulysses forward of ``shard`` (this rank's slice of ``packed``) runs in: with images, the
    VLM's forward builds the whole row's embeddings with the image features and takes its slice
    (verl.models.vision.sequence_parallel_images); without, nothing."""
    if not images:
        return contextlib.nullcontext()
    from verl.models.vision import sequence_parallel_images

    return sequence_parallel_images(module, packed.input_ids, shard.pad, shard.start, shard.width,
                                    images.get("pixel_values"), images.get("image_grid_thw"),
                                    images.get("pixel_values_videos"), images.get("video_grid_thw"))


def vision_kwargs(micro_batch: TensorDict, column: Any) -> dict[str, torch.Tensor]:
    """pixel_values / image_grid_thw (and the video inputs) of the micro-batch's rows, concatenated in row order (the
    order of their image / video tokens in the batch); nothing for a text batch or rows without images or videos."""
    if column is None or MM_ROW not in micro_batch.keys():
        return {}
    rows = [column[int(i)] for i in micro_batch[MM_ROW].tolist()]
    device = micro_batch["input_ids"].device
    kwargs = {}
    for key in MEDIA_INPUT_KEYS:
        parts = [row[key] for row in rows if row and row.get(key) is not None]
        if parts:
            kwargs[key] = torch.cat([torch.as_tensor(p).reshape(-1) if key == "second_per_grid_ts" else
                                     torch.as_tensor(p) for p in parts]).to(device)
    return kwargs


def hf_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """Our batches keep a VLM's position ids as (bs, axes, L) so they split by row; HF's Qwen-VL takes (axes, bs, L)."""
    return position_ids.transpose(0, 1) if position_ids.dim() == 3 else position_ids
