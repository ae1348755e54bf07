"""Tiny offline videos for the video tests: mp4 files written with OpenCV, and tiny Qwen-VL folders whose video
processor takes small frames (``video_preprocessor_config.json``)."""

from __future__ import annotations

import json
import os

import numpy as np

from tests.helpers.tiny_vlm import save_tiny_vlm_dir

VIDEO_SIZE = {"shortest_edge": 8 * 8, "longest_edge": 32 * 32}  # the tiny image processor's bounds, per frame
QWEN3_VIDEO_SIZE = {"shortest_edge": 8 * 8, "longest_edge": 8 * 32 * 32}  # Qwen3-VL: bounds on the whole clip


def frame(index: int, height: int = 16, width: int = 24) -> np.ndarray:
    """An (H, W, 3) uint8 RGB frame that differs per index (a moving bright column on a coloured ground)."""
    image = np.zeros((height, width, 3), dtype=np.uint8)
    image[..., 0] = (40 * index) % 256
    image[..., 2] = 255 - (25 * index) % 256
    image[:, (3 * index) % width] = 255
    return image


def write_mp4(path, frames: int = 10, fps: float = 4.0, height: int = 16, width: int = 24) -> str:
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    for i in range(frames):
        writer.write(cv2.cvtColor(frame(i, height, width), cv2.COLOR_RGB2BGR))
    writer.release()
    return str(path)


def save_tiny_video_vlm_dir(folder, family: str = "qwen2_5_vl", seed: int = 0) -> str:
    """A tiny VLM folder (tests.helpers.tiny_vlm) with a video processor config sized for tiny frames."""
    folder = save_tiny_vlm_dir(folder, family, seed)
    with open(os.path.join(folder, "video_preprocessor_config.json"), "w", encoding="utf-8") as handle:
        json.dump({"size": QWEN3_VIDEO_SIZE if family == "qwen3_vl" else VIDEO_SIZE, "patch_size": 4,
                   "merge_size": 2, "temporal_patch_size": 2}, handle)
    return folder
