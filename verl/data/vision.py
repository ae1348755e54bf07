"""Images in RL rows, and the 3-D (mrope) position ids of Qwen2-VL / Qwen2.5-VL prompts.

Rows follow upstream's geo3k layout: the prompt text holds one ``<image>`` placeholder per picture and the
``data.image_key`` column (default ``images``) a list of ``{"bytes": ...}`` or ``{"path": ...}`` entries (a PIL image
or a path string also works). Messages become content lists (``{"type": "image"}`` / ``{"type": "text", ...}``) that
the processor's chat template renders as the model's vision tokens.

Position ids of a vision-language prompt are (4, L) as upstream and transformers (>= 4.54) take them: row 0 the
text positions (0, 1, ... over the real tokens, which transformers uses to find packed segments), rows 1-3 the
temporal / height / width rotary positions: a text token advances all three by one; an image's merged patches
sit on a (t, h, w) grid starting after the text before it, and the text after it resumes past the grid's largest
extent.
"""

from __future__ import annotations

import io
import os
import re
from typing import Any

import torch

__all__ = ["load_image", "split_placeholders", "count_placeholders", "mrope_position_ids", "vision_position_ids",
           "response_position_ids", "image_token_count", "ImageError"]

_PLACEHOLDER = re.compile(r"(<image>|<video>)")


class ImageError(ValueError):
    """A row's image cannot be read."""


def load_image(value: Any, where: str) -> Any:
    """A PIL RGB image from a {"bytes": ...} / {"path": ...} entry, raw bytes, a path string or a PIL image.
    ``where`` names the row and column in the error."""
    from PIL import Image

    if isinstance(value, Image.Image):
        return value.convert("RGB")
    source: Any = value
    if isinstance(value, dict):
        source = value.get("bytes") or value.get("path") or value.get("image")
        if source is None:
            raise ImageError(f"{where}: an image entry needs 'bytes' or 'path', got keys {sorted(value)}")
    try:
        if isinstance(source, bytes | bytearray):
            image = Image.open(io.BytesIO(source))
        elif isinstance(source, str):
            path = os.path.expanduser(source.removeprefix("file://"))
            if not os.path.isfile(path):
                raise ImageError(f"{where}: image file {source!r} does not exist")
            image = Image.open(path)
        else:
            raise ImageError(f"{where}: an image must be bytes, a path or a PIL image, got {type(source).__name__}")
        image.load()
    except ImageError:
        raise
    except Exception as err:  # noqa: BLE001 - PIL raises several types for a bad file
        raise ImageError(f"{where}: not a readable image ({type(err).__name__}: {err})") from err
    return image.convert("RGB")


def count_placeholders(messages: list[dict[str, Any]], token: str = "<image>") -> int:
    return sum(str(m.get("content", "")).count(token) for m in messages if isinstance(m.get("content"), str))


def split_placeholders(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages whose string content is split at ``<image>`` / ``<video>`` into typed parts, as the processors'
    chat templates take them; the text between placeholders is kept exactly (empty pieces dropped)."""
    out = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            parts = []
            for piece in _PLACEHOLDER.split(content):
                if piece == "<image>":
                    parts.append({"type": "image"})
                elif piece == "<video>":
                    parts.append({"type": "video"})
                elif piece:
                    parts.append({"type": "text", "text": piece})
            content = parts
        out.append({**message, "content": content})
    return out


def image_token_count(image_grid_thw: torch.Tensor, merge_size: int) -> int:
    """LM tokens the images of one prompt take: t * h * w / merge_size**2 each."""
    return int((image_grid_thw.prod(-1) // (merge_size * merge_size)).sum()) if image_grid_thw.numel() else 0


def _vision_blocks(image_grid_thw: torch.Tensor | None, video_grid_thw: torch.Tensor | None,
                   second_per_grid_ts: Any, tokens_per_second: float | None) -> dict[str, list]:
    """Per modality, the (t, h, w, time interval) of each block in order."""
    blocks: dict[str, list] = {"image": [], "video": []}
    for grid in ([] if image_grid_thw is None else torch.as_tensor(image_grid_thw).reshape(-1, 3).tolist()):
        blocks["image"].append((*grid, 1.0))
    videos = [] if video_grid_thw is None else torch.as_tensor(video_grid_thw).reshape(-1, 3).tolist()
    seconds = [1.0] * len(videos) if second_per_grid_ts is None else torch.as_tensor(second_per_grid_ts).tolist()
    for grid, second in zip(videos, seconds):
        # Qwen2.5-VL spaces the temporal positions by tokens_per_second * seconds per grid; Qwen2-VL by 1
        blocks["video"].append((*grid, tokens_per_second * second if tokens_per_second else 1.0))
    return blocks


def mrope_position_ids(input_ids: torch.Tensor, attention_mask: torch.Tensor, image_grid_thw: torch.Tensor | None,
                       image_token_id: int, merge_size: int, video_grid_thw: torch.Tensor | None = None,
                       video_token_id: int | None = None, second_per_grid_ts: Any = None,
                       tokens_per_second: float | None = None) -> torch.Tensor:
    """(3, L) rotary positions of one prompt (L tokens, padding where ``attention_mask`` is 0 gets 0), as the
    installed transformers' ``get_rope_index`` computes them: a vision block (an image, or a video of t temporal
    patches) takes temporal positions start + floor(k * interval), height / width positions start + row / column of
    its merged grid; the text after it resumes at start + max(h, w)."""
    valid = attention_mask.bool()
    ids = input_ids[valid].tolist()
    blocks = _vision_blocks(image_grid_thw, video_grid_thw, second_per_grid_ts, tokens_per_second)
    kinds = {image_token_id: "image"}
    if video_token_id is not None:
        kinds[int(video_token_id)] = "video"
    used = {"image": 0, "video": 0}
    positions = torch.zeros(3, len(ids), dtype=torch.long)
    cursor, start = 0, 0
    while cursor < len(ids):
        kind = kinds.get(ids[cursor])
        if kind is None:
            positions[:, cursor] = start
            cursor, start = cursor + 1, start + 1
            continue
        if used[kind] >= len(blocks[kind]):
            raise ValueError(f"mrope_position_ids: more {kind} tokens than the {len(blocks[kind])} {kind} grids given")
        t, h, w, interval = blocks[kind][used[kind]]
        h, w = h // merge_size, w // merge_size
        count = t * h * w
        token = ids[cursor]
        if ids[cursor:cursor + count] != [token] * count:
            raise ValueError(f"mrope_position_ids: {kind} {used[kind]} needs {count} consecutive {kind} tokens")
        temporal = (torch.arange(t) * interval).long()
        grid = torch.stack(torch.meshgrid(temporal, torch.arange(h), torch.arange(w), indexing="ij"))
        positions[:, cursor:cursor + count] = grid.reshape(3, -1) + start
        cursor, start, used[kind] = cursor + count, start + max(h, w), used[kind] + 1
    out = torch.zeros(3, input_ids.numel(), dtype=torch.long)
    out[:, valid] = positions
    return out


def vision_position_ids(input_ids: torch.Tensor, attention_mask: torch.Tensor, image_grid_thw: torch.Tensor | None,
                        image_token_id: int, merge_size: int, **video: Any) -> torch.Tensor:
    """(4, L): the text positions (row 0) above the three mrope rows, as upstream stores a VLM prompt's.
    ``video``: video_grid_thw, video_token_id, second_per_grid_ts, tokens_per_second (``mrope_position_ids``)."""
    text = (torch.cumsum(attention_mask.long(), -1) - 1).clamp(min=0) * attention_mask.long()
    mrope = mrope_position_ids(input_ids, attention_mask, image_grid_thw, image_token_id, merge_size, **video)
    return torch.cat([text[None], mrope], dim=0)


def response_position_ids(prompt_position_ids: torch.Tensor, response_length: int) -> torch.Tensor:
    """Position ids of ``response_length`` tokens after left-padded prompts: (bs, P) or (bs, 4, P) in, the same
    rank out with length R. The text positions (and row 0 of a VLM's) continue from the prompt's last by 1, 2, ...;
    the three mrope rows all continue from their largest value, as HF's decoding steps do (rope deltas): that is
    the last position too, except after a video whose time axis reaches past the text that follows it."""
    delta = torch.arange(1, response_length + 1, device=prompt_position_ids.device)
    if prompt_position_ids.dim() != 3:
        return prompt_position_ids[..., -1:] + delta.view(1, -1)
    last = prompt_position_ids[..., -1:].clone()
    last[:, 1:] = prompt_position_ids[:, 1:].amax(dim=(1, 2), keepdim=True)
    return last + delta.view(1, 1, -1)
