"""Videos in RL / SFT rows, read as upstream's ``process_video`` reads them (qwen_vl_utils' ``fetch_video``).

A ``data.video_key`` column (default ``videos``) holds, per row, a list of entries, one per ``<video>`` placeholder:

- ``{"video": "/abs/clip.mp4"}`` (``file://`` allowed): decoded with OpenCV (``cv2.VideoCapture``), then
  ``nframes`` frames are taken evenly (``round(linspace(0, total - 1, nframes))``), where ``nframes`` is the entry's
  ``nframes`` rounded to a multiple of 2, or ``total / video_fps * fps`` (``fps`` default 2) clamped to
  [``min_frames`` (4), ``max_frames`` (768)] and to the video's frames, floored to a multiple of 2; each frame is
  resized by the Qwen smart_resize rule (factor patch*merge, ``min_pixels`` / ``max_pixels``, the video's
  ``total_pixels`` budget shared over its frames);
- ``{"video": [frame, frame, ...]}``: images (``{"bytes"/"path"}`` entries, paths, PIL), each resized like an image
  (the entry's ``min_pixels`` / ``max_pixels``, else the image processor's), padded to an even count by repeating
  the last; its fps is the entry's ``fps`` (default 2);
- a plain path string stands for ``{"video": path}``.

The result per video is (frames uint8 (T, 3, H, W), metadata {fps, total_num_frames, frames_indices}): what
``multi_modal_data["video"]`` carries and what the processor's video processor turns into
``pixel_values_videos`` / ``video_grid_thw`` (and Qwen2.5-VL's ``second_per_grid_ts``, from the sampled fps).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from verl.data.vision import ImageError, load_image

__all__ = ["VideoError", "load_video", "row_videos", "smart_nframes", "VIDEO_FPS", "FRAME_FACTOR"]

VIDEO_FPS = 2.0  # qwen_vl_utils' FPS
FPS_MIN_FRAMES, FPS_MAX_FRAMES = 4, 768
FRAME_FACTOR = 2
_ENTRY_KEYS = {"video", "type", "fps", "nframes", "min_frames", "max_frames", "min_pixels", "max_pixels",
               "total_pixels", "resized_height", "resized_width"}


class VideoError(ImageError):
    """A row's video cannot be read (a subclass of ImageError: the same row-naming checks catch both)."""


def _round(value: float, factor: int) -> int:
    return round(value / factor) * factor


def smart_nframes(entry: dict[str, Any], total_frames: int, video_fps: float) -> int:
    """How many frames to take from a video of ``total_frames`` at ``video_fps`` (qwen_vl_utils' rule)."""
    if "nframes" in entry and "fps" in entry:
        raise ValueError("a video entry takes either nframes or fps, not both")
    if entry.get("nframes") is not None:
        nframes = _round(float(entry["nframes"]), FRAME_FACTOR)
    else:
        fps = float(entry.get("fps") or VIDEO_FPS)
        min_frames = math.ceil(int(entry.get("min_frames") or FPS_MIN_FRAMES) / FRAME_FACTOR) * FRAME_FACTOR
        max_frames = math.floor(int(entry.get("max_frames") or min(FPS_MAX_FRAMES, total_frames)) / FRAME_FACTOR)
        max_frames *= FRAME_FACTOR
        nframes = total_frames / video_fps * fps
        nframes = min(max(nframes, min_frames), max_frames, total_frames)
        nframes = math.floor(nframes / FRAME_FACTOR) * FRAME_FACTOR
    if not FRAME_FACTOR <= nframes <= total_frames:
        raise ValueError(f"the video has {total_frames} frames; the entry asks for {nframes} (nframes must lie in "
                         f"[{FRAME_FACTOR}, {total_frames}])")
    return int(nframes)


def _decode(path: str, where: str) -> tuple[np.ndarray, float]:
    """All frames of a video file as (T, H, W, 3) RGB uint8, and its fps."""
    import cv2

    capture = cv2.VideoCapture(path)
    try:
        if not capture.isOpened():
            raise VideoError(f"{where}: OpenCV cannot open video file {path!r}")
        fps = float(capture.get(cv2.CAP_PROP_FPS) or 0.0)
        frames = []
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    finally:
        capture.release()
    if not frames:
        raise VideoError(f"{where}: video file {path!r} holds no decodable frame")
    if fps <= 0:
        raise VideoError(f"{where}: video file {path!r} has no frame rate")
    return np.stack(frames), fps


def _resize(frames: np.ndarray, height: int, width: int) -> np.ndarray:
    """(T, H, W, 3) uint8 -> (T, 3, height, width) uint8, bicubic (PIL)."""
    from PIL import Image

    out = [np.asarray(Image.fromarray(f).resize((width, height), Image.BICUBIC)) if f.shape[:2] != (height, width)
           else f for f in frames]
    return np.stack(out).transpose(0, 3, 1, 2).copy()


def _file_video(entry: dict[str, Any], path: str, where: str, factor: int, min_pixels: int,
                max_pixels: int) -> tuple[np.ndarray, dict[str, Any]]:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    local = os.path.expanduser(path.removeprefix("file://"))
    if not os.path.isfile(local):
        raise VideoError(f"{where}: video file {path!r} does not exist")
    frames, video_fps = _decode(local, where)
    total = len(frames)
    try:
        nframes = smart_nframes(entry, total, video_fps)
    except ValueError as err:
        raise VideoError(f"{where}: {err}") from err
    indices = np.round(np.linspace(0, total - 1, nframes)).astype(int).tolist()
    frames = frames[indices]
    low = int(entry.get("min_pixels") or min_pixels)
    budget = float(entry.get("total_pixels") or 128000 * factor * factor * 0.9)
    high = max(min(max_pixels, budget / nframes * FRAME_FACTOR), int(low * 1.05))
    high = min(int(entry.get("max_pixels") or high), high)
    if entry.get("resized_height") and entry.get("resized_width"):
        height, width = smart_resize(int(entry["resized_height"]), int(entry["resized_width"]), factor=factor,
                                     min_pixels=low, max_pixels=high)
    else:
        height, width = smart_resize(frames.shape[1], frames.shape[2], factor=factor, min_pixels=low, max_pixels=high)
    meta = {"fps": video_fps, "total_num_frames": total, "frames_indices": indices}
    return _resize(frames, height, width), meta


def _frame_list_video(entry: dict[str, Any], frames: list[Any], where: str, factor: int, image_min: int,
                      image_max: int) -> tuple[np.ndarray, dict[str, Any]]:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    if not frames:
        raise VideoError(f"{where}: a video entry's frame list is empty")
    try:
        images = [load_image(frame, f"{where} frame {i}") for i, frame in enumerate(frames)]
    except ImageError as err:
        raise VideoError(str(err)) from err
    low, high = int(entry.get("min_pixels") or image_min), int(entry.get("max_pixels") or image_max)
    arrays = []
    for image in images:
        height, width = smart_resize(image.height, image.width, factor=factor, min_pixels=low, max_pixels=high)
        arrays.append(_resize(np.asarray(image)[None], height, width)[0])
    if len({a.shape for a in arrays}) > 1:
        raise VideoError(f"{where}: the video's frames resize to different sizes {sorted({a.shape for a in arrays})}; "
                         "give frames of one size")
    count = math.ceil(len(arrays) / FRAME_FACTOR) * FRAME_FACTOR
    arrays += [arrays[-1]] * (count - len(arrays))
    fps = float(entry.get("fps") or VIDEO_FPS)
    meta = {"fps": fps, "total_num_frames": len(arrays), "frames_indices": list(range(len(arrays)))}
    return np.stack(arrays), meta


def load_video(value: Any, where: str, processor: Any,
               patch_size: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """One video entry -> (uint8 frames (T, 3, H, W), metadata). ``processor``: the model folder's (its video
    processor's factor and pixel bounds are the defaults, as transformers' are qwen_vl_utils'). ``where`` names the
    row and column in errors."""
    video_processor = getattr(processor, "video_processor", None)
    image_processor = processor.image_processor
    factor = int(image_processor.patch_size) * int(image_processor.merge_size)
    if patch_size is not None:  # data.image_patch_size: upstream resizes frames by it (merge 2, qwen_vl_utils')
        factor = int(patch_size) * 2
    entry = {"video": value} if isinstance(value, (str, list, tuple)) else value
    if isinstance(entry, dict):  # a parquet struct column gives every field, unset ones as None
        entry = {k: v for k, v in entry.items() if v is not None}
    if not isinstance(entry, dict) or entry.get("video") is None:
        raise VideoError(f"{where}: a video entry is {{'video': '/path/clip.mp4' or [frame, ...], optional fps / "
                         f"nframes / min_frames / max_frames / min_pixels / max_pixels}}; got {type(value).__name__}"
                         + (f" with keys {sorted(value)}" if isinstance(value, dict) else ""))
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise VideoError(f"{where}: video entry keys {unknown} are not understood; known: {sorted(_ENTRY_KEYS)}")
    source = entry["video"]
    if isinstance(source, str):
        size = getattr(video_processor, "size", None) or {}
        return _file_video(entry, source, where, factor, int(size.get("shortest_edge", 128 * 28 * 28)),
                           int(size.get("longest_edge", 768 * 28 * 28)))
    if isinstance(source, (list, tuple)) or hasattr(source, "tolist"):
        size = image_processor.size
        low = size.get("shortest_edge") if isinstance(size, dict) else getattr(size, "shortest_edge", None)
        high = size.get("longest_edge") if isinstance(size, dict) else getattr(size, "longest_edge", None)
        return _frame_list_video(entry, list(source), where, factor, int(low), int(high))
    raise VideoError(f"{where}: a video must be a file path or a list of frames, got {type(source).__name__}")


def row_videos(value: Any, video_key: str, row: int, processor: Any,
               patch_size: int | None = None) -> list[tuple[np.ndarray, dict[str, Any]]]:
    """A row's videos (the ``data.video_key`` column's value), each (frames, metadata); errors name the row.
    ``patch_size`` (data.image_patch_size, as upstream's process_video): frames resized to multiples of it x 2
    instead of the processor's patch x merge."""
    if value is None:
        return []
    if isinstance(value, (dict, str)):  # one entry instead of a list of them
        value = [value]
    where = f"row {row} column {video_key!r} (data.video_key)"
    return [load_video(entry, f"{where} video {i}", processor, patch_size) for i, entry in enumerate(list(value))]
