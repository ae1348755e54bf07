"""vLLM's Qwen2-VL / Qwen2.5-VL on a machine without torchvision (the CPU torch: docs/vlm.md says why it is absent).

Three things in vLLM 0.32 need torchvision only through transformers, and none of them for images:

1. ``vllm.model_executor.models.qwen2_vl`` imports ``smart_resize`` from transformers' torchvision image processor
   module, whose first line imports torchvision. The PIL image processor module carries the same function
   (transformers marks it "Copied from"), so a stand-in module holding it and the PIL processor class is put in
   ``sys.modules`` under that name, only when the real module cannot import.
2. vLLM inspects a model class in a fresh Python process (its registry's subprocess), where the stand-in does not
   exist; registering the already-imported classes makes vLLM inspect them in this process instead.
3. vLLM builds the HF processor itself (``Qwen2VLProcessor.from_pretrained``), which fails without torchvision
   (the video processor). ``verl.models.processor.load_processor`` builds the image-only processor the data
   pipeline uses; vLLM's processor loader is wrapped to return that one, for the registered model folders only.

The engine runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, engine.py), so all three reach the code
that builds and runs the multi-modal processor. Videos stay refused (``limit_mm_per_prompt={"video": 0}``; the engine's
processor holds no video processor, and video rows with ``rollout.name=vllm`` are refused before Ray).
"""

from __future__ import annotations

import os
import sys
import threading
import types
from typing import Any

__all__ = ["is_vision_config", "vllm_vision_problem", "prepare_vision_engine", "vision_engine_kwargs",
           "collapse_image_tokens", "engine_prompt", "check_expansion", "row_images", "vision_token_bias",
           "with_logit_bias"]

# vLLM clamps a logit bias to [-100, 100]; e^-100 is as good as the actor's SUPPRESSED_LOGIT for every log-prob
_SUPPRESS_BIAS = -100.0

_TORCHVISION_MODULE = "transformers.models.qwen2_vl.image_processing_qwen2_vl"
# HF architecture -> the vLLM module that implements it
_ARCHITECTURES = {
    "Qwen2VLForConditionalGeneration": "vllm.model_executor.models.qwen2_vl",
    "Qwen2_5_VLForConditionalGeneration": "vllm.model_executor.models.qwen2_5_vl",
    "Qwen3VLForConditionalGeneration": "vllm.model_executor.models.qwen3_vl",
}
_MODEL_TYPES = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
                "qwen3_vl": "Qwen3VLForConditionalGeneration"}
# what vLLM's processor loader may pass besides the folder; anything else would be ignored by our processor
_LOADER_KWARGS = {"tokenizer", "revision", "code_revision", "trust_remote_code", "processor_cls"}

_lock = threading.Lock()
_folders: dict[str, tuple[str, bool]] = {}  # realpath -> (the config key to name in errors, trust_remote_code)
_processors: dict[tuple[str, int | None], Any] = {}  # (folder, id of vLLM's tokenizer or None) -> processor
_original_loader = None


def is_vision_config(hf_config) -> bool:
    """Whether an HF config is a vision-language model's (it has a vision sub-config)."""
    return getattr(hf_config, "vision_config", None) is not None


def _architecture(hf_config) -> str:
    """The vLLM architecture of the config (its ``architectures``, else its model type: an in-memory config of a
    model built from a config has no ``architectures`` until it is saved)."""
    names = list(getattr(hf_config, "architectures", None) or [])
    names.append(_MODEL_TYPES.get(getattr(hf_config, "model_type", None), ""))
    supported = [n for n in names if n in _ARCHITECTURES]
    if not supported:
        raise ValueError(f"actor_rollout_ref.rollout.name=vllm: the model (architectures {names[:-1]}, model_type "
                         f"{getattr(hf_config, 'model_type', None)!r}) has no vision path here; built: "
                         f"{sorted(_ARCHITECTURES)}. Use actor_rollout_ref.rollout.name=hf")
    return supported[0]


def vllm_vision_problem(hf_config) -> str | None:
    """Why the vLLM rollout cannot serve this vision-language config (None: it can), for a check before Ray."""
    try:
        _architecture(hf_config)
    except ValueError as err:
        return str(err)
    return None


def vision_engine_kwargs(hf_config) -> dict[str, Any]:
    """Engine settings a vision model needs:

    - the tokenizer: vLLM's multi-modal processor refuses to start without it (``skip_tokenizer_init`` can only
      hold for text models; requests still go in and come out as token ids);
    - no videos (not built): they get no profiling budget;
    - the image processor normalizes the pixels (as it does for the actor's pixel_values), not the vision tower:
      vLLM's device-side normalization keeps the mean / std as buffers that a dummy-weight start
      (``load_format=dummy*``, verl's default) fills with random values and no weight sync restores, as no
      checkpoint names them."""
    _architecture(hf_config)
    return {"skip_tokenizer_init": False, "limit_mm_per_prompt": {"video": 0},
            "mm_device_do_normalize": False}


def _install_smart_resize_module() -> None:
    if _TORCHVISION_MODULE in sys.modules:
        return
    try:
        __import__(_TORCHVISION_MODULE)
        return
    except ImportError:
        pass  # torchvision is missing: the stand-in below replaces the module
    from transformers.models.qwen2_vl import image_processing_pil_qwen2_vl as pil

    stand_in = types.ModuleType(_TORCHVISION_MODULE)
    stand_in.__doc__ = "verl: transformers' PIL Qwen2-VL image processor standing in for the torchvision one"
    stand_in.smart_resize = pil.smart_resize
    stand_in.Qwen2VLImageProcessor = pil.Qwen2VLImageProcessorPil
    stand_in.__all__ = ["Qwen2VLImageProcessor"]
    sys.modules[_TORCHVISION_MODULE] = stand_in


def _register_architecture(arch: str) -> None:
    import importlib

    from vllm import ModelRegistry

    module = importlib.import_module(_ARCHITECTURES[arch])
    ModelRegistry.register_model(arch, getattr(module, arch))


class _NoVideoProcessor:
    """Stands in the image-only processor's empty video slot: vLLM reads the slot's kwarg names (``valid_kwargs``)
    for every modality the architecture has, and Qwen3-VL's budget for the largest video (an item count of 0 still
    sizes one) from its geometry, which is the image processor's; processing a video is refused, as the data
    pipeline refuses them."""

    # Qwen3-VL's video processor defaults: frames sampled at 2 fps, 4 to 768 of them
    fps, min_frames, max_frames = 2.0, 4, 768

    def __init__(self, key: str, image_processor: Any = None) -> None:
        from transformers.processing_utils import VideosKwargs

        self.valid_kwargs = VideosKwargs
        self.key = key
        for name in ("size", "patch_size", "merge_size", "temporal_patch_size"):
            if hasattr(image_processor, name):
                setattr(self, name, getattr(image_processor, name))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"videos are not built for the vLLM rollout of {self.key} (and data.video_key is "
                                  "refused); send images only")


def _our_processor(folder: str, tokenizer: Any, key: str, trust_remote_code: bool) -> Any:
    """One processor per (folder, tokenizer): vLLM asks again and again (its own loader is lru-cached). vLLM first
    asks without a tokenizer (to read the processor's kwarg names); the folder's own then serves."""
    from verl.models.processor import load_processor

    cache_key = (folder, None if tokenizer is None else id(tokenizer))  # the processor keeps the tokenizer alive
    if cache_key not in _processors:
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
        processor = load_processor(folder, tokenizer, key, trust_remote_code=trust_remote_code)
        if processor is None:
            raise ValueError(f"{key}={folder!r}: vLLM needs the folder's multi-modal processor "
                             "(preprocessor_config.json with processor_class) for image rows")
        # the engine's own copy: no videos through vLLM (verl's video processor serves the data and the HF rollout)
        processor.video_processor = _NoVideoProcessor(key, getattr(processor, "image_processor", None))
        _processors[cache_key] = processor
    return _processors[cache_key]


def _loader(processor_name, *args, **kwargs):
    """vLLM's ``cached_get_processor``, answering for the registered folders with verl's image-only processor."""
    folder = os.path.realpath(str(processor_name)) if isinstance(processor_name, (str, os.PathLike)) else None
    if folder not in _folders:
        return _original_loader(processor_name, *args, **kwargs)
    key, trust_remote_code = _folders[folder]
    extra = sorted(set(kwargs) - _LOADER_KWARGS)
    if args or extra:
        raise ValueError(f"vLLM asked for the processor of {key}={folder!r} with settings {extra or args} that verl's "
                         "image processor would not apply; remove them from actor_rollout_ref.rollout.engine_kwargs."
                         "vllm (mm_processor_kwargs) and set them in the folder's preprocessor_config.json")
    processor = _our_processor(folder, kwargs.get("tokenizer"), key, trust_remote_code)
    wanted = kwargs.get("processor_cls")
    if wanted is not None and not isinstance(processor, wanted):
        raise TypeError(f"vLLM expects a {wanted} processor for {key}={folder!r}; verl built a {type(processor)}")
    return processor


def _wrap_processor_loader() -> None:
    global _original_loader
    import vllm.transformers_utils.processor as processors

    if _original_loader is None:
        _original_loader = processors.cached_get_processor
        processors.cached_get_processor = _loader


def prepare_vision_engine(model_path: str, hf_config, key: str = "actor_rollout_ref.model.path",
                          trust_remote_code: bool = False) -> None:
    """Before ``vllm.LLM(model=model_path)``: let vLLM import, inspect and process for this vision model here."""
    from verl.models.processor import torchvision_usable

    arch = _architecture(hf_config)
    with _lock:
        if not torchvision_usable():
            _install_smart_resize_module()
            _register_architecture(arch)
            _wrap_processor_loader()
            _folders[os.path.realpath(model_path)] = (key, trust_remote_code)


def collapse_image_tokens(prompt_ids: list[int], image_token_id: int) -> list[int]:
    """One image token per run of them: vLLM's Qwen-VL processor expands each into the image's own count again."""
    kept: list[int] = []
    for token in prompt_ids:
        if token == image_token_id and kept and kept[-1] == image_token_id:
            continue
        kept.append(token)
    return kept


def engine_prompt(prompt_ids: list[int], images: list[Any] | None, image_token_id: int | None) -> dict[str, Any]:
    """vLLM's token prompt (``TokensPrompt``) for one request: the ids, and with images their multi-modal data, the
    image tokens collapsed to one per image (the engine expands them again from each image's grid)."""
    if not images:
        return {"prompt_token_ids": list(prompt_ids)}
    if image_token_id is None:
        raise ValueError("a rollout request carries images but the model's config has no image_token_id; "
                         "actor_rollout_ref.model.path must be a vision-language model folder")
    return {"prompt_token_ids": collapse_image_tokens(prompt_ids, int(image_token_id)),
            "multi_modal_data": {"image": list(images)}}


def check_expansion(sent: list[int], engine_prompt_ids: Any, where: str) -> None:
    """The engine's expanded prompt must be the one the data made: the actor recomputes log-probs on the latter."""
    engine_ids = list(engine_prompt_ids or [])
    if engine_ids != list(sent):
        raise ValueError(f"{where}: vLLM expanded the images into a prompt of {len(engine_ids)} tokens where the data "
                         f"has {len(sent)}: the engine's image processor settings differ from the model folder's "
                         "preprocessor_config.json the data used (remove mm_processor_kwargs from "
                         "actor_rollout_ref.rollout.engine_kwargs.vllm)")


def row_images(column: Any, row: int) -> list[Any] | None:
    """The images of one row of a ``multi_modal_data`` column ({"image": [PIL, ...]} or empty)."""
    if column is None:
        return None
    data = column[row]
    return list((data or {}).get("image") or []) or None


def vision_token_bias(hf_config) -> dict[int, float]:
    """The logit bias that keeps a VLM's responses free of vision tokens, as the HF rollout and the actor suppress
    them (verl.models.vision.SUPPRESSED_LOGIT says why); empty for a text model. Applied before vLLM's temperature,
    so the processed log-probs it returns are of the distribution the actor recomputes."""
    from verl.models.vision import vision_token_ids

    return {token: _SUPPRESS_BIAS for token in vision_token_ids(hf_config)}


def with_logit_bias(params: dict[str, Any], bias: dict[int, float]) -> dict[str, Any]:
    """``params`` (SamplingParams fields) with ``bias`` added to any logit bias they carry; the same dict if none."""
    if not bias:
        return params
    merged = dict(params.get("logit_bias") or {})
    merged.update(bias)
    return {**params, "logit_bias": merged}
