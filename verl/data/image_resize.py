"""``data.image_patch_size`` (upstream v0.7): each image of a row is resized before the processor sees it, as
upstream's dataset does through qwen_vl_utils (``process_image(image, image_patch_size=...)``).

The Qwen rule (``smart_resize``): both sides become multiples of ``image_patch_size * 2`` (the vision tower merges
2 x 2 patches into one token), keeping the aspect ratio, with the pixel count between 4 and 16384 such tokens. An
image entry's own ``min_pixels`` / ``max_pixels``, or ``resized_height`` / ``resized_width``, win, as in
qwen_vl_utils. The default (14) is the patch of Qwen2-VL / Qwen2.5-VL, whose processors then keep the size as it is;
Qwen3-VL's patch is 16 (set ``data.image_patch_size=16``); the default with another processor patch: see
``patch_size_for``. The resized image is what the prompt-length filter counts, what ``multi_modal_inputs`` holds and
what the rollout engine receives. Video frames are sized by the same factor (verl.data.video, as upstream's
process_video).
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["SPATIAL_MERGE_SIZE", "MIN_TOKENS", "MAX_TOKENS", "fit_image_to_patches", "patch_size_for"]

SPATIAL_MERGE_SIZE = 2
MIN_TOKENS = 4  # qwen_vl_utils' bounds on one image's merged tokens
MAX_TOKENS = 16384


def fit_image_to_patches(image: Any, patch_size: int, entry: Any = None) -> Any:
    """``image`` (PIL RGB) resized for ``patch_size``; ``entry``: the row's image entry (a dict may carry
    min_pixels / max_pixels / resized_height / resized_width)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    if patch_size < 1:
        raise ValueError(f"data.image_patch_size must be >= 1, got {patch_size}")
    factor = int(patch_size) * SPATIAL_MERGE_SIZE
    options = entry if isinstance(entry, dict) else {}
    low, high = MIN_TOKENS * factor * factor, MAX_TOKENS * factor * factor
    if options.get("resized_height") and options.get("resized_width"):
        height, width = smart_resize(int(options["resized_height"]), int(options["resized_width"]), factor=factor,
                                     min_pixels=low, max_pixels=high)
    else:
        low, high = int(options.get("min_pixels") or low), int(options.get("max_pixels") or high)
        height, width = smart_resize(image.height, image.width, factor=factor, min_pixels=low, max_pixels=high)
    if (width, height) == image.size:
        return image
    return image.resize((width, height))


DEFAULT_PATCH_SIZE = 14
_warned: set[int] = set()


def patch_size_for(processor: Any, image_patch_size: int | None) -> int | None:
    """The patch size the images are fitted to before ``processor``, or None for none.

    Upstream resizes with ``data.image_patch_size`` whatever the model's patch is. Left at its default (14) with a
    processor whose patch differs (Qwen3-VL's 16, or a small test model's), upstream would resize twice (to
    multiples of 28, then the processor to its own); here the images then go to the processor as they are, with a
    warning to set ``data.image_patch_size`` to the processor's patch. Any other value is honoured as upstream."""
    if image_patch_size is None:
        return None
    own = getattr(getattr(processor, "image_processor", None), "patch_size", None)
    if image_patch_size == DEFAULT_PATCH_SIZE and own is not None and int(own) != DEFAULT_PATCH_SIZE:
        if int(own) not in _warned:
            _warned.add(int(own))
            logger.warning("data.image_patch_size is left at %d but the processor's patch is %d: images go to the "
                           "processor unresized; set data.image_patch_size=%d to resize them as upstream does",
                           DEFAULT_PATCH_SIZE, int(own), int(own))
        return None
    return int(image_patch_size)
