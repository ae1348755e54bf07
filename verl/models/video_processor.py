"""A Qwen2-VL / Qwen2.5-VL / Qwen3-VL video processor that needs no torchvision (docs/vlm.md says why torchvision is
absent).

transformers' ``Qwen2VLVideoProcessor`` is a torchvision processor; this one produces the same outputs from the
folder's PIL image processor:

- each frame is resized with the Qwen ``smart_resize`` rule (sides multiples of patch_size * merge_size, the
  pixel count within the video processor's ``size`` {shortest_edge, longest_edge}; transformers' defaults
  128*28*28 and 768*28*28, or the folder's ``video_preprocessor_config.json``), then rescaled and normalized with
  the image processor's own methods, so a frame gives exactly the pixels an image of it would;
- the frames (padded to a multiple of ``temporal_patch_size`` by repeating the last one) are cut into patches laid
  out as transformers lays them: (grid_t, h / merge, w / merge, merge, merge, channel, temporal_patch, patch, patch)
  flattened to ``pixel_values_videos`` (t*h*w, C*tp*p*p), with ``video_grid_thw`` = [[t, h, w]] per video. One image
  repeated ``temporal_patch_size`` times is what the image processor makes of a still picture;
- ``video_metadata`` (transformers' ``VideoMetadata``: the source fps and which frames were taken) per video, from
  which Qwen2.5-VL's processor computes ``second_per_grid_ts`` = temporal_patch_size / sampled fps.

Qwen3-VL (``timestamps=True``): transformers' Qwen3VLVideoProcessor rule instead: the pixel bounds hold for the
whole clip (frames rounded to temporal_patch_size times height times width), defaults 128*32*32 .. 768*32*32, and its
processor writes each temporal patch's timestamp (from the metadata's fps and frame indices) before the patch's
``<|vision_start|><|video_pad|>...<|vision_end|>``, which is why metadata must travel with the frames.

Frames come decoded and sampled (``verl.data.video`` reads files and frame lists as upstream's ``fetch_video``
does); this processor does not sample.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

__all__ = ["QwenVideoProcessor", "load_video_processor", "VIDEO_CONFIG_FILE", "frames_as_arrays",
           "video_model_inputs"]

VIDEO_CONFIG_FILE = "video_preprocessor_config.json"
# transformers' Qwen2VLVideoProcessor defaults (and qwen_vl_utils' VIDEO_MIN_PIXELS / VIDEO_MAX_PIXELS)
_DEFAULT_SIZE = {"shortest_edge": 128 * 28 * 28, "longest_edge": 768 * 28 * 28}
# transformers' Qwen3VLVideoProcessor defaults (bounds on the whole clip's pixels)
_QWEN3_SIZE = {"shortest_edge": 128 * 32 * 32, "longest_edge": 32 * 32 * 768}
# call kwargs this processor applies; the processor's merged kwargs may also carry these, unset
_HANDLED = {"video_metadata", "return_tensors", "return_metadata", "do_sample_frames"}


def frames_as_arrays(video: Any) -> list[np.ndarray]:
    """One video's frames as (3, H, W) uint8 arrays: a (T, 3, H, W) or (T, H, W, 3) tensor / array (floats in
    0..255, as upstream's fetch_video returns them, are rounded), or a list of PIL images / (H, W, 3) arrays."""
    from PIL import Image

    if isinstance(video, (list, tuple)):
        frames = []
        for frame in video:
            if isinstance(frame, Image.Image):
                frames.append(np.asarray(frame.convert("RGB")).transpose(2, 0, 1))
            else:
                frames.extend(frames_as_arrays(np.asarray(frame)[None]))
        return frames
    array = video.numpy() if hasattr(video, "numpy") else np.asarray(video)
    if array.ndim != 4:
        raise ValueError(f"a video must be (frames, 3, H, W) or (frames, H, W, 3); got shape {tuple(array.shape)}")
    if array.shape[1] != 3 and array.shape[-1] == 3:
        array = array.transpose(0, 3, 1, 2)
    if array.dtype != np.uint8:
        array = np.clip(np.round(array), 0, 255).astype(np.uint8)
    return [np.ascontiguousarray(frame) for frame in array]


class QwenVideoProcessor:
    """Frames -> ``pixel_values_videos`` / ``video_grid_thw`` (+ ``video_metadata``), as transformers'
    Qwen2VLVideoProcessor lays them out, through ``image_processor``'s resize / rescale / normalize."""

    model_input_names = ["pixel_values_videos", "video_grid_thw"]

    def __init__(self, image_processor: Any, size: dict[str, int] | None = None, image_mean: Any = None,
                 image_std: Any = None, patch_size: int | None = None, temporal_patch_size: int | None = None,
                 merge_size: int | None = None, tokens_per_second: float | None = None, fps: float = 2.0,
                 min_frames: int = 4, max_frames: int = 768, timestamps: bool = False) -> None:
        from transformers.processing_utils import VideosKwargs

        self.valid_kwargs = VideosKwargs  # what transformers' and vLLM's kwarg routing read from a video processor
        self.image_processor = image_processor
        self.size = dict(size or _DEFAULT_SIZE)
        if not self.size.get("shortest_edge") or not self.size.get("longest_edge"):
            raise ValueError(f"a video processor's size needs shortest_edge and longest_edge (pixels), got {self.size}")
        self.image_mean = list(image_mean if image_mean is not None else image_processor.image_mean)
        self.image_std = list(image_std if image_std is not None else image_processor.image_std)
        self.patch_size = int(patch_size or image_processor.patch_size)
        self.temporal_patch_size = int(temporal_patch_size or image_processor.temporal_patch_size)
        self.merge_size = int(merge_size or image_processor.merge_size)
        self.tokens_per_second = tokens_per_second  # Qwen2.5-VL's vision_config.tokens_per_second (mrope time axis)
        self.fps, self.min_frames, self.max_frames = fps, min_frames, max_frames  # upstream's sampling defaults
        # Qwen3-VL: whole-clip pixel bounds, timestamps in the text, one position block per temporal patch
        self.timestamps = timestamps

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    def resized_size(self, height: int, width: int, frames: int) -> tuple[int, int]:
        """The frames' size after resizing: Qwen2-VL's per-frame rule, or Qwen3-VL's whole-clip rule."""
        low, high = self.size["shortest_edge"], self.size["longest_edge"]
        if self.timestamps:
            from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as clip_resize

            return clip_resize(num_frames=max(frames, self.temporal_patch_size), height=height, width=width,
                               temporal_factor=self.temporal_patch_size, factor=self.factor, min_pixels=low,
                               max_pixels=high)
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        return smart_resize(height, width, factor=self.factor, min_pixels=low, max_pixels=high)

    def _frame_pixels(self, frame: np.ndarray, height: int, width: int) -> np.ndarray:
        """One (3, H, W) uint8 frame -> resized to (height, width), rescaled, normalized float32 (3, h, w), with the
        image processor's own operations (its resize to an exact size is the one its smart_resize rule ends in)."""
        from transformers.image_utils import SizeDict

        ip = self.image_processor
        image = frame
        if frame.shape[-2:] != (height, width):
            image = super(type(ip), ip).resize(frame, size=SizeDict(height=height, width=width), resample=ip.resample)
        image = ip.rescale(image, ip.rescale_factor)
        image = ip.normalize(image, self.image_mean, self.image_std)
        return np.asarray(image, dtype=np.float32)

    def patchify(self, frames: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """(T, C, H, W) normalized frames -> ((t*h*w, C*tp*p*p) patches, [t, h, w])."""
        tp, p, m = self.temporal_patch_size, self.patch_size, self.merge_size
        if pad := -frames.shape[0] % tp:  # the last frame repeated up to a whole temporal patch
            frames = np.concatenate([frames, np.repeat(frames[-1:], pad, axis=0)])
        count, channels, height, width = frames.shape
        t, h, w = count // tp, height // p, width // p
        patches = frames.reshape(t, tp, channels, h // m, m, p, w // m, m, p)
        # -> (t, h/m, w/m, m_h, m_w, C, tp, p_h, p_w)
        patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
        return patches.reshape(t * h * w, channels * tp * p * p), [t, h, w]

    def __call__(self, videos: Any, video_metadata: Any = None, return_tensors: Any = None, **kwargs: Any) -> Any:
        from transformers.feature_extraction_utils import BatchFeature
        from transformers.video_utils import VideoMetadata

        unknown = sorted(k for k, v in kwargs.items() if v is not None and k not in _HANDLED)
        if unknown:
            raise ValueError(f"video processor: settings {unknown} are not applied here (frames arrive decoded and "
                             "sampled by verl.data.video); set them on the row's video entry instead")
        if kwargs.get("do_sample_frames"):
            raise ValueError("video processor: do_sample_frames=True is not built; frames are sampled when the row's "
                             "video is read (fps / nframes on its entry)")
        if not isinstance(videos, (list, tuple)) or (videos and _is_frame(videos[0])):
            videos = [videos]  # one video
        metadata = list(video_metadata) if video_metadata is not None else [None] * len(videos)
        if len(metadata) != len(videos):
            raise ValueError(f"video processor: {len(videos)} videos but {len(metadata)} video_metadata entries")
        pixels, grids, metas = [], [], []
        for video, meta in zip(videos, metadata):
            frames = frames_as_arrays(video)
            if not frames:
                raise ValueError("video processor: a video without frames")
            height, width = self.resized_size(*frames[0].shape[-2:], len(frames))
            patches, grid = self.patchify(np.stack([self._frame_pixels(f, height, width) for f in frames]))
            pixels.append(patches)
            grids.append(grid)
            metas.append(_metadata(meta, len(frames), VideoMetadata))
        data = {"pixel_values_videos": np.concatenate(pixels), "video_grid_thw": np.array(grids, dtype=np.int64),
                "video_metadata": metas}
        return BatchFeature(data=data, tensor_type=return_tensors, skip_tensor_conversion=["video_metadata"])

    def to_dict(self) -> dict[str, Any]:
        return {"size": dict(self.size), "image_mean": self.image_mean, "image_std": self.image_std,
                "patch_size": self.patch_size, "temporal_patch_size": self.temporal_patch_size,
                "merge_size": self.merge_size, "fps": self.fps, "min_frames": self.min_frames,
                "max_frames": self.max_frames,
                "video_processor_type": "Qwen3VLVideoProcessor" if self.timestamps else "Qwen2VLVideoProcessor"}

    def save_pretrained(self, directory: str) -> str:
        file = os.path.join(directory, VIDEO_CONFIG_FILE)
        with open(file, "w", encoding="utf-8") as handle:
            json.dump(self.to_dict(), handle, indent=2)
        return file


def _is_frame(value: Any) -> bool:
    """Whether ``value`` is one frame (a PIL image or a 3-D array), i.e. its list is one video's frames."""
    from PIL import Image

    return isinstance(value, Image.Image) or (hasattr(value, "ndim") and value.ndim == 3)


def _metadata(meta: Any, frames: int, cls: type) -> Any:
    """A VideoMetadata for one video: the given one (object or dict), else ``frames`` frames at an unknown fps
    (transformers then assumes 24 fps for Qwen2.5-VL's second_per_grid_ts)."""
    if meta is None:
        return cls(total_num_frames=frames)
    if isinstance(meta, cls):
        return meta
    fields = {k: meta[k] for k in ("total_num_frames", "fps", "width", "height", "duration", "video_backend",
                                   "frames_indices") if meta.get(k) is not None}
    fields.setdefault("total_num_frames", frames)
    if fields.get("frames_indices") is not None:
        fields["frames_indices"] = [int(i) for i in fields["frames_indices"]]
    return cls(**fields)


def load_video_processor(path: str, image_processor: Any, hf_config: dict[str, Any] | None = None,
                         timestamps: bool = False) -> QwenVideoProcessor:
    """The folder's video processor: ``video_preprocessor_config.json`` where the folder has one (size or
    min_pixels / max_pixels, mean / std, patch sizes, fps / min_frames / max_frames), else transformers' defaults
    with the image processor's patch geometry and normalization. ``hf_config``: the folder's config.json (its
    vision_config.tokens_per_second, Qwen2.5-VL's time scale of the mrope positions). ``timestamps``: Qwen3-VL."""
    config: dict[str, Any] = {}
    file = os.path.join(path, VIDEO_CONFIG_FILE)
    if os.path.isfile(file):
        with open(file, encoding="utf-8") as handle:
            config = json.load(handle)
    size = dict(config.get("size") or (_QWEN3_SIZE if timestamps else _DEFAULT_SIZE))
    if config.get("min_pixels"):
        size["shortest_edge"] = int(config["min_pixels"])
    if config.get("max_pixels"):
        size["longest_edge"] = int(config["max_pixels"])
    vision = (hf_config or {}).get("vision_config") or {}
    return QwenVideoProcessor(
        image_processor, size=size, image_mean=config.get("image_mean"), image_std=config.get("image_std"),
        patch_size=config.get("patch_size"), temporal_patch_size=config.get("temporal_patch_size"),
        merge_size=config.get("merge_size"), tokens_per_second=vision.get("tokens_per_second"),
        fps=float(config.get("fps") or 2.0), min_frames=int(config.get("min_frames") or 4),
        max_frames=int(config.get("max_frames") or 768), timestamps=timestamps)


def video_model_inputs(processor: Any, videos: list[Any]) -> dict[str, Any]:
    """The model inputs of decoded videos ((frames, metadata) pairs, as ``multi_modal_data["video"]`` holds them):
    ``pixel_values_videos`` / ``video_grid_thw``, and ``second_per_grid_ts`` (temporal_patch_size / sampled fps) where
    the processor's model takes it (Qwen2.5-VL), exactly as the processor's own call makes them for the dataset."""
    import torch

    video_processor = getattr(processor, "video_processor", None)
    if video_processor is None:
        raise ValueError(f"videos reached a rollout whose processor ({type(processor).__name__}) has no video "
                         "processor; videos are built for Qwen2-VL / Qwen2.5-VL / Qwen3-VL")
    frames, metadata = zip(*[(pair[0], pair[1]) for pair in videos])
    out = video_processor(videos=list(frames), video_metadata=list(metadata), do_sample_frames=False,
                          return_tensors="pt")
    inputs = {"pixel_values_videos": out["pixel_values_videos"], "video_grid_thw": out["video_grid_thw"]}
    if "second_per_grid_ts" in getattr(processor, "model_input_names", ()):
        inputs["second_per_grid_ts"] = torch.tensor(
            [video_processor.temporal_patch_size / meta.sampled_fps for meta in out["video_metadata"]])
    return inputs
