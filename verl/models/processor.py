"""The multi-modal processor of a model folder (upstream's ``hf_processor``): tokenizer + image processor.

transformers builds a Qwen2-VL / Qwen2.5-VL processor with a video processor, and its video processors need
torchvision. On a CPU torch, PyPI's Linux torchvision wheels (CUDA builds) cannot load: their ``_C`` extension
links the CUDA torch libraries, and ``import torchvision`` then fails at ``register_fake("torchvision::nms")``.
Without torchvision, transformers 5.16-5.19 fail while *checking* the processor's arguments
(``VIDEO_PROCESSOR_MAPPING has no attribute '_extra_content'``), even with ``video_processor=None``.

So: ``AutoProcessor`` when it works (a GPU machine with a matching torchvision); otherwise the processor class named
by the folder, built from its tokenizer and its image processor (transformers' PIL backend,
``Qwen2VLImageProcessorPil``). Its video slot holds verl's torchvision-free video processor
(``verl.models.video_processor``) for Qwen2-VL, Qwen2.5-VL and Qwen3-VL. Text-only folders give None, as upstream's
``hf_processor`` does.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["load_processor", "image_only_processor", "processor_class_name", "torchvision_usable",
           "VIDEO_PROCESSOR_CLASSES"]

# the processor classes whose videos verl's video processor serves (Qwen3-VL's with timestamps in the text)
VIDEO_PROCESSOR_CLASSES = ("Qwen2VLProcessor", "Qwen2_5_VLProcessor", "Qwen3VLProcessor")

_PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


def torchvision_usable() -> bool:
    """Whether ``import torchvision`` works here (the CUDA wheel on a CPU torch does not)."""
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure means the video processors cannot be built
        return False
    return True


def processor_class_name(path: str) -> str | None:
    """The ``processor_class`` a model folder declares (processor_config.json, else preprocessor_config.json)."""
    for name in _PROCESSOR_FILES:
        file = os.path.join(path, name)
        if os.path.isfile(file):
            with open(file, encoding="utf-8") as handle:
                declared = json.load(handle).get("processor_class")
            if declared:
                return str(declared)
    return None


def image_only_processor(processor_cls: type, image_processor: Any, tokenizer: Any,
                         chat_template: str | None = None, video_processor: Any = None) -> Any:
    """An instance of ``processor_cls`` (a transformers ProcessorMixin with a video_processor slot) holding no video
    processor or verl's (``verl.models.video_processor.QwenVideoProcessor``): the argument check transformers runs
    on the video slot is skipped for those, nothing else changes."""
    from verl.models.video_processor import QwenVideoProcessor

    class ImageOnly(processor_cls):  # type: ignore[misc, valid-type]
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and (argument is None or isinstance(argument, QwenVideoProcessor)):
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

        def to_dict(self):
            """transformers' dict (what repr prints), verl's video processor as its settings."""
            video = self.__dict__.get("video_processor")
            if not isinstance(video, QwenVideoProcessor):
                return super().to_dict()
            self.__dict__["video_processor"] = None
            try:
                output = super().to_dict()
            finally:
                self.__dict__["video_processor"] = video
            output["video_processor"] = video.to_dict()
            return output

        def save_pretrained(self, save_directory, **kwargs):
            """What a checkpoint's HF folder needs to load this processor again (transformers' own save stops at
            the missing video processor): the image processor's preprocessor_config.json naming the processor class,
            the tokenizer files and the chat template."""
            os.makedirs(save_directory, exist_ok=True)
            self.image_processor.save_pretrained(save_directory)
            file = os.path.join(save_directory, "preprocessor_config.json")
            with open(file, encoding="utf-8") as handle:
                config = json.load(handle)
            config["processor_class"] = processor_cls.__name__
            with open(file, "w", encoding="utf-8") as handle:
                json.dump(config, handle, indent=2)
            self.tokenizer.save_pretrained(save_directory)
            if self.video_processor is not None:
                self.video_processor.save_pretrained(save_directory)
            if self.chat_template:
                with open(os.path.join(save_directory, "chat_template.json"), "w", encoding="utf-8") as handle:
                    json.dump({"chat_template": self.chat_template}, handle)
            return [file]

    ImageOnly.__name__ = ImageOnly.__qualname__ = processor_cls.__name__
    return ImageOnly(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                     chat_template=chat_template)


def _folder_chat_template(path: str, tokenizer: Any) -> str | None:
    for name in ("chat_template.json", "chat_template.jinja"):
        file = os.path.join(path, name)
        if os.path.isfile(file):
            with open(file, encoding="utf-8") as handle:
                text = handle.read()
            return json.loads(text)["chat_template"] if name.endswith(".json") else text
    return getattr(tokenizer, "chat_template", None)


def _build_without_video(path: str, tokenizer: Any, trust_remote_code: bool) -> Any:
    import transformers
    from transformers import AutoImageProcessor

    name = processor_class_name(path)
    processor_cls = getattr(transformers, name, None) if name else None
    if processor_cls is None:
        return None
    import inspect

    if "video_processor" not in inspect.signature(processor_cls.__init__).parameters:
        return None
    image_processor = AutoImageProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
    video_processor = None
    if name in VIDEO_PROCESSOR_CLASSES:
        from verl.models.video_processor import load_video_processor

        config_file = os.path.join(path, "config.json")
        hf_config = None
        if os.path.isfile(config_file):
            with open(config_file, encoding="utf-8") as handle:
                hf_config = json.load(handle)
        video_processor = load_video_processor(path, image_processor, hf_config,
                                               timestamps=name == "Qwen3VLProcessor")
    return image_only_processor(processor_cls, image_processor, tokenizer, _folder_chat_template(path, tokenizer),
                                video_processor)


def load_processor(path: str, tokenizer: Any, key: str, trust_remote_code: bool = False) -> Any:
    """The folder's multi-modal processor, or None for a text-only model (no processor files, or a processor that is
    only a tokenizer). ``tokenizer`` is the run's tokenizer (its pad token and chat template are kept)."""
    if not os.path.isdir(path) or not any(os.path.isfile(os.path.join(path, f)) for f in _PROCESSOR_FILES):
        return None
    if torchvision_usable():
        from transformers import AutoProcessor

        try:
            processor = AutoProcessor.from_pretrained(path, trust_remote_code=trust_remote_code)
        except Exception as err:  # noqa: BLE001 - re-raised with the key
            raise RuntimeError(f"could not load the processor from {key}={path!r}: {type(err).__name__}: {err}") from err
        if hasattr(processor, "tokenizer"):
            processor.tokenizer = tokenizer
    else:
        try:
            processor = _build_without_video(path, tokenizer, trust_remote_code)
        except Exception as err:  # noqa: BLE001
            raise RuntimeError(f"could not load the processor from {key}={path!r} (torchvision is not usable here, so "
                               f"it is built without a video processor): {type(err).__name__}: {err}") from err
    if processor is None or "Processor" not in type(processor).__name__ or not hasattr(processor, "image_processor"):
        return None
    return processor
