"""Images in agent-loop trajectories (Qwen2-VL / Qwen2.5-VL): what a loop needs to render them, and the batch keys
the actor trains on.

A trajectory's images are its row's (``multi_modal_data["image"]``, first and in order) followed by the images its
tools returned (``ToolResponse.image``), each in the order of its image tokens. Prompt images sit in the prompt,
tool images in the response (inside masked tool turns). From them the batch gets, per row:

- ``multi_modal_inputs``: pixel_values / image_grid_thw of all of the trajectory's images (the row's share of the
  dataset's own inputs, then the image processor's output for the tool images). The actor reads these instead of
  the dataset's (the trainer moves the dataset's to the rollout in async mode: verl.trainer.ppo.agent_rollout);
- ``position_ids`` (4, P + R): a row without response images keeps the sync rollout's layout (the prompt's 3-D
  positions, continued by 1, 2, ... over the response); a row with tool images gets the mrope positions of the whole
  sequence with all its grids, since an image in the response moves every position after it.

A row's videos (``multi_modal_data["video"]``, prompt videos only: no loop puts a video in a response) keep the
dataset's pixel_values_videos / video_grid_thw (/ second_per_grid_ts) and enter the positions with their grids.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from verl.data.rl_vision import video_position_kwargs
from verl.data.vision import load_image, response_position_ids, split_placeholders, vision_position_ids
from verl.protocol import DataProto
from verl.workers.rollout.agent_loop.base import AgentLoopOutput

__all__ = ["VisionChat", "vision_batch", "image_inputs", "leading_inputs", "trajectory_images"]

_MEDIA_KEYS = ("pixel_values", "image_grid_thw")
_MARK_BEFORE, _MARK_AFTER = "\x02verl-image-before\x02", "\x02verl-image-after\x02"


def _vision_ids(processor: Any) -> tuple[int, int]:
    image_token_id = getattr(processor, "image_token_id", None)
    merge = int(getattr(getattr(processor, "image_processor", None), "merge_size", 0) or 0)
    if image_token_id is None or not merge:
        raise ValueError("the agent loop got images (vision-language rows or a tool's ToolResponse.image) but the "
                         "rollout has no Qwen-VL processor; actor_rollout_ref.model.path must be the vision-language "
                         "model folder (Qwen2-VL / Qwen2.5-VL)")
    return int(image_token_id), merge


def image_inputs(processor: Any, images: list[Any]) -> dict[str, torch.Tensor]:
    """pixel_values / image_grid_thw of ``images`` through the folder's image processor (as the dataset makes them)."""
    if not images:
        return {}
    out = processor.image_processor(images=list(images), return_tensors="pt")
    return {k: torch.as_tensor(out[k]) for k in _MEDIA_KEYS if k in out}


def _grid(inputs: dict | None) -> torch.Tensor:
    grid = (inputs or {}).get("image_grid_thw")
    return torch.zeros(0, 3, dtype=torch.long) if grid is None else torch.as_tensor(grid).reshape(-1, 3)


def leading_inputs(inputs: dict | None, count: int) -> dict[str, torch.Tensor]:
    """The first ``count`` images' share of one row's inputs: their grid rows and their patches of pixel_values
    (t*h*w rows each, in image order)."""
    grid = _grid(inputs)
    if count == 0:
        return {}
    if grid.size(0) < count:
        raise ValueError(f"multi_modal_inputs hold {grid.size(0)} images, fewer than the row's {count}")
    if grid.size(0) == count:
        return {k: torch.as_tensor(inputs[k]) for k in _MEDIA_KEYS if k in inputs}
    patches = int(grid[:count].prod(-1).sum())
    return {"pixel_values": torch.as_tensor(inputs["pixel_values"])[:patches], "image_grid_thw": grid[:count]}


def _concat(first: dict, second: dict) -> dict[str, torch.Tensor]:
    if not second:
        return dict(first)
    if not first:
        return dict(second)
    return {k: torch.cat([torch.as_tensor(first[k]), torch.as_tensor(second[k])]) for k in _MEDIA_KEYS}


def _same_image(a: Any, b: Any) -> bool:
    return a is b or (getattr(a, "size", None) == getattr(b, "size", None) and a.tobytes() == b.tobytes())


def trajectory_images(output: AgentLoopOutput) -> list[Any]:
    return list((output.multi_modal_data or {}).get("image") or [])


class VisionChat:
    """What a multi-turn loop needs to put images into its conversation as tokens: the model's image placeholder
    text (what its processor's chat template writes for one image), and the expansion of each image token into the
    image's t*h*w / merge**2 tokens, as the processor expands a prompt's."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self.image_token_id, self.merge = _vision_ids(processor)
        self.placeholder = self._placeholder_text(processor)
        # a row's videos (prompt videos only): Qwen2-VL / Qwen2.5-VL, whose video text is a placeholder run like an
        # image's; Qwen3-VL's processor writes timestamps between a video's patches, which this loop does not
        video_processor = getattr(processor, "video_processor", None)
        self.video_token_id = getattr(processor, "video_token_id", None)
        self.video_placeholder = (self._placeholder_text(processor, "video") if video_processor is not None
                                  and not getattr(video_processor, "timestamps", False) else None)

    @staticmethod
    def _placeholder_text(processor: Any, kind: str = "image") -> str:
        """Rendered once through the processor's own template, so tool and prompt images look exactly like the
        dataset's prompt images (e.g. Qwen's ``<|vision_start|><|image_pad|><|vision_end|>``)."""
        parts = [{"type": "text", "text": _MARK_BEFORE}, {"type": kind}, {"type": "text", "text": _MARK_AFTER}]
        text = processor.apply_chat_template([{"role": "user", "content": parts}], tokenize=False)
        start, end = text.find(_MARK_BEFORE), text.find(_MARK_AFTER)
        if start < 0 or end < 0:
            raise ValueError("the processor's chat template does not render a user message's text parts; cannot "
                             "find how it writes an image")
        return text[start + len(_MARK_BEFORE):end]

    def messages(self, messages: list[dict], image_count: int, where: str, video_count: int = 0) -> list[dict]:
        """The row's messages with every ``<image>`` / ``<video>`` placeholder (or typed part) as the model's image /
        video text, string contents, so any chat template (verl_hermes included) renders them; their counts must be
        the row's image and video counts."""
        out, found, videos = [], 0, 0
        for message in split_placeholders(messages):
            content = message.get("content")
            if isinstance(content, list):
                pieces = []
                for part in content:
                    kind = part.get("type")
                    if kind == "image":
                        found += 1
                        pieces.append(self.placeholder)
                    elif kind == "text":
                        pieces.append(part.get("text") or "")
                    elif kind == "video" and self.video_placeholder is not None:
                        videos += 1
                        pieces.append(self.video_placeholder)
                    elif kind == "video":
                        raise NotImplementedError(
                            f"{where}: the row holds a video, which the tool / interaction agent loop renders for "
                            f"Qwen2-VL / Qwen2.5-VL only ({type(self.processor).__name__} writes timestamps into the "
                            "prompt); use the single-turn loop: actor_rollout_ref.rollout.multi_turn.enable=false")
                    else:
                        raise ValueError(f"{where}: a message part of type {kind!r} is not supported by the tool "
                                         "agent loop (images and text only)")
                content = "".join(pieces)
            out.append({**message, "content": content})
        if found != image_count:
            raise ValueError(f"{where}: the prompt has {found} <image> placeholders but the row carries {image_count} "
                             "images (multi_modal_data); they must match one to one")
        if videos != video_count:
            raise ValueError(f"{where}: the prompt has {videos} <video> placeholders but the row carries {video_count} "
                             "videos (multi_modal_data); they must match one to one")
        return out

    def tool_content(self, text: str, image_count: int) -> str:
        """A tool turn's content: its images first, then its text (upstream's order of content parts)."""
        return self.placeholder * image_count + text

    def expand(self, ids: list[int], grid: torch.Tensor, where: str,
               video_grid: torch.Tensor | None = None) -> list[int]:
        """Each image (video) token of ``ids`` as its image's (video's) merged patches (grid rows in token order)."""
        runs = {self.image_token_id: ("image", grid)}
        if self.video_token_id is not None:
            runs[int(self.video_token_id)] = ("video", torch.zeros(0, 3) if video_grid is None else video_grid)
        counts = {}
        for token, (kind, rows) in runs.items():
            counts[token] = [int(g.prod()) // (self.merge * self.merge) for g in torch.as_tensor(rows).reshape(-1, 3)]
            found = sum(1 for t in ids if t == token)
            if found != len(counts[token]):
                raise ValueError(f"{where}: the rendered text holds {found} {kind} tokens for {len(counts[token])} "
                                 f"{kind}s")
        out, used = [], dict.fromkeys(counts, 0)
        for token in ids:
            if token in counts:
                out += [token] * counts[token][used[token]]
                used[token] += 1
            else:
                out.append(token)
        return out

    def collapse(self, ids: list[int]) -> list[int]:
        """One image / video token per run: the text the chat template rendered (for the tokenization check)."""
        vision = {self.image_token_id, self.video_token_id}
        return [t for k, t in enumerate(ids) if t not in vision or k == 0 or ids[k - 1] != t]

    def video_grid(self, videos: list[Any], inputs: dict | None = None) -> torch.Tensor:
        """The row's videos' grid rows: its dataset inputs' when given, else the video processor's."""
        if inputs and inputs.get("video_grid_thw") is not None:
            return torch.as_tensor(inputs["video_grid_thw"]).reshape(-1, 3)
        from verl.models.video_processor import video_model_inputs

        return video_model_inputs(self.processor, videos)["video_grid_thw"]

    def load(self, images: list[Any], where: str) -> list[Any]:
        """A tool's images as RGB PIL images: PIL images, bytes, paths or {"bytes"/"path"} entries as the data takes
        them, and (H, W, 3) uint8 arrays, which upstream's processor also takes."""
        from PIL import Image

        out = []
        for k, image in enumerate(images):
            if isinstance(image, np.ndarray):
                if image.dtype != np.uint8 or image.ndim != 3 or image.shape[-1] != 3:
                    raise ValueError(f"{where} image {k}: an array image must be (H, W, 3) uint8, got "
                                     f"{image.dtype} {tuple(image.shape)}")
                image = Image.fromarray(image)
            out.append(load_image(image, f"{where} image {k}"))
        return out

    def grid(self, images: list[Any], inputs: dict | None = None) -> torch.Tensor:
        """The images' grid rows: the first len(images) of ``inputs`` when given (the row's dataset inputs), else
        the image processor's."""
        return _grid(leading_inputs(inputs, len(images)) if inputs else image_inputs(self.processor, images))


# -- the batch -----------------------------------------------------------------------------------------------------


def _column_item(prompts: DataProto, key: str, index: int) -> Any:
    column = prompts.non_tensor_batch.get(key)
    return column[index] if column is not None else None


def vision_batch(batch: DataProto, outputs: list[AgentLoopOutput], prompts: DataProto, processor: Any) -> None:
    """Give ``batch`` (outputs_to_batch's) its rows' images, in place: ``multi_modal_inputs`` and (bs, 4, P + R)
    position ids. Nothing happens for a text batch: 2-D prompt position ids, no image column and no images."""
    if (prompts.batch["position_ids"].dim() != 3 and "multi_modal_inputs" not in prompts.non_tensor_batch
            and not any(trajectory_images(o) for o in outputs)):
        return
    image_token_id, merge = _vision_ids(processor)
    prompt_length = batch.batch["prompts"].size(1)
    response_length = batch.batch["responses"].size(1)
    positions, inputs = [], []
    for i, output in enumerate(outputs):
        row_inputs, extra_inputs = _row_media(batch, prompts, processor, i, output, image_token_id, merge)
        videos = _row_video_inputs(batch, prompts, processor, i, output)
        video = video_position_kwargs(processor, videos)
        mask = batch.batch["attention_mask"][i]
        prompt = vision_position_ids(batch.batch["prompts"][i], mask[:prompt_length], _grid(row_inputs),
                                     image_token_id, merge, **video)
        if not extra_inputs:  # no image in the response: the sync rollout's layout
            row = torch.cat([prompt, response_position_ids(prompt[None], response_length)[0]], dim=-1)
        else:
            ids = batch.batch["input_ids"][i].clone()
            # an image token the model generated is text to it (HF's decoding positions advance by one there)
            ids[prompt_length:][batch.batch["response_mask"][i].bool() & (ids[prompt_length:] == image_token_id)] = -1
            everything = _concat(row_inputs, extra_inputs)
            try:
                row = vision_position_ids(ids, mask, _grid(everything), image_token_id, merge, **video)
            except ValueError as err:
                raise ValueError(f"agent loop output {i}: {err}") from err
        positions.append(row)
        inputs.append({**_concat(row_inputs, extra_inputs), **videos})
    batch.batch["position_ids"] = torch.stack(positions)
    column = np.empty(len(outputs), dtype=object)
    column[:] = inputs
    batch.non_tensor_batch["multi_modal_inputs"] = column


_VIDEO_KEYS = ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


def _row_video_inputs(batch: DataProto, prompts: DataProto, processor: Any, i: int,
                      output: AgentLoopOutput) -> dict[str, Any]:
    """The row's video inputs (the dataset's, else the processor's for its videos); {} for a row without videos.
    The trajectory must carry the row's videos and its prompt their tokens, as the dataset expanded them."""
    where = f"agent loop output {i}"
    row_videos = list((_column_item(prompts, "multi_modal_data", i) or {}).get("video") or [])
    carried = list((output.multi_modal_data or {}).get("video") or [])
    if len(carried) != len(row_videos):
        raise ValueError(f"{where}: the trajectory carries {len(carried)} videos but its row has {len(row_videos)}; an "
                         "agent loop must send its row's videos (video_data) and return them in "
                         "AgentLoopOutput.multi_modal_data['video'] (tool videos are not built)")
    if not row_videos:
        return {}
    dataset_inputs = _column_item(prompts, "multi_modal_inputs", i) or {}
    if dataset_inputs.get("video_grid_thw") is not None:
        inputs = {k: torch.as_tensor(dataset_inputs[k]) for k in _VIDEO_KEYS if dataset_inputs.get(k) is not None}
    else:
        from verl.models.video_processor import video_model_inputs

        inputs = video_model_inputs(processor, row_videos)
    merge = int(processor.video_processor.merge_size)
    expected = int(torch.as_tensor(inputs["video_grid_thw"]).prod(-1).sum()) // (merge * merge)
    found = int((batch.batch["prompts"][i] == int(processor.video_token_id)).sum())
    if found != expected:
        raise ValueError(f"{where}: the prompt holds {found} video tokens but the row's {len(row_videos)} videos take "
                         f"{expected}; a loop's prompt must expand each video as the processor does")
    return inputs


def _row_media(batch: DataProto, prompts: DataProto, processor: Any, i: int, output: AgentLoopOutput,
               image_token_id: int, merge: int) -> tuple[dict, dict]:
    """(the row's images' inputs, the inputs of the tool images whose tokens the kept response holds)."""
    where = f"agent loop output {i}"
    row_images = list((_column_item(prompts, "multi_modal_data", i) or {}).get("image") or [])
    images = trajectory_images(output)
    if len(images) < len(row_images) or not all(_same_image(a, b) for a, b in zip(images, row_images)):
        raise ValueError(f"{where}: the trajectory carries {len(images)} images but its row has {len(row_images)}; "
                         "an agent loop must send its row's images (image_data) and return them first in "
                         "AgentLoopOutput.multi_modal_data['image'], followed by any image a tool returned")
    dataset_inputs = _column_item(prompts, "multi_modal_inputs", i)
    row_inputs = (leading_inputs(dataset_inputs, len(row_images)) if _grid(dataset_inputs).size(0)
                  else image_inputs(processor, row_images))
    prompt_tokens = int((batch.batch["prompts"][i] == image_token_id).sum())
    expected = int(_grid(row_inputs).prod(-1).sum()) // (merge * merge)
    if prompt_tokens != expected:
        raise ValueError(f"{where}: the prompt holds {prompt_tokens} image tokens but the row's {len(row_images)} "
                         f"images take {expected}; a loop's prompt must expand each image as the processor does")
    extra = images[len(row_images):]
    response = batch.batch["responses"][i]
    tool_part = batch.batch["attention_mask"][i, -response.numel():].bool() & ~batch.batch["response_mask"][i].bool()
    tokens = int(((response == image_token_id) & tool_part).sum())
    if not tokens:
        return row_inputs, {}
    if not extra:
        raise ValueError(f"{where}: the response's tool/user turns hold {tokens} image tokens but the trajectory "
                         "carries no image beyond its row's (AgentLoopOutput.multi_modal_data['image'])")
    extra_inputs = image_inputs(processor, extra)
    cumulative = (_grid(extra_inputs).prod(-1) // (merge * merge)).cumsum(0).tolist()
    if tokens not in cumulative:  # the batch's response was cut inside an image
        raise ValueError(f"{where}: the kept response holds {tokens} tool image tokens, which is not a whole number "
                         f"of the trajectory's tool images ({cumulative} tokens for the first 1, 2, ...); a loop must "
                         "not cut a response inside an image")
    return row_inputs, leading_inputs(extra_inputs, cumulative.index(tokens) + 1)
