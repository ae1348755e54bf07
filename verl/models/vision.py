"""Vision-language model parts: which submodule is the vision tower, freezing it (actor.freeze_vision_tower), and
running it on every rank of a sharded model (enable_blank_image_forward)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import inspect

import torch

__all__ = ["vision_tower", "freeze_vision_tower", "is_vision_language_config", "enable_blank_image_forward",
           "vision_token_ids", "suppress_vision_tokens", "SUPPRESSED_LOGIT", "sequence_parallel_images"]


def is_vision_language_config(config) -> bool:
    """Whether an HF config is a vision-language model's (it has a vision sub-config)."""
    return getattr(config, "vision_config", None) is not None


def vision_tower(model: torch.nn.Module) -> torch.nn.Module | None:
    """The vision encoder (with its merger/projector) of a Qwen2-VL / Qwen2.5-VL style model, peft-wrapped too."""
    get_base = getattr(model, "get_base_model", None)
    base = get_base() if callable(get_base) and hasattr(model, "peft_config") else model
    for holder in (base, getattr(base, "model", None)):
        tower = getattr(holder, "visual", None) if holder is not None else None
        if isinstance(tower, torch.nn.Module):
            return tower
    return None


def freeze_vision_tower(model: torch.nn.Module) -> int:
    """Stop gradients into the vision tower; returns the number of parameters frozen. Raises for a model without
    one, naming the key."""
    tower = vision_tower(model)
    if tower is None:
        raise ValueError(f"actor_rollout_ref.actor.freeze_vision_tower=true, but {type(model).__name__} has no vision "
                         "tower; it applies to vision-language models (Qwen2-VL / Qwen2.5-VL)")
    count = 0
    for parameter in tower.parameters():
        parameter.requires_grad_(False)
        count += parameter.numel()
    return count


def _parent_of_tower(model: torch.nn.Module, tower: torch.nn.Module) -> torch.nn.Module | None:
    """The module that owns ``tower`` as its ``visual`` (Qwen2VLModel and kin): the one whose forward runs it."""
    for module in model.modules():
        if getattr(module, "visual", None) is tower:
            return module
    return None


def _tensors_of(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, dict):  # ModelOutput is a dict
        return [t for v in value.values() for t in _tensors_of(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors_of(v)]
    return []


def _tower_on_blank_image(tower: torch.nn.Module) -> torch.Tensor:
    """The tower's outputs on one blank image of (1, 2·merge, 2·merge) patches, folded to a scalar: every output
    (the merged features, deepstack features where a family has them) so every vision parameter takes part."""
    cfg = tower.config
    merge = int(getattr(cfg, "spatial_merge_size", 2))
    patch = int(getattr(cfg, "patch_size", 14))
    temporal = int(getattr(cfg, "temporal_patch_size", 2))
    channels = int(getattr(cfg, "in_channels", getattr(cfg, "in_chans", 3)))
    side = 2 * merge
    device = next(tower.parameters()).device
    pixels = torch.zeros(side * side, channels * temporal * patch * patch, device=device)
    grid = torch.tensor([[1, side, side]], device=device)
    outputs = _tensors_of(tower(pixels, grid_thw=grid))
    return sum(t.float().mean() for t in outputs)


def enable_blank_image_forward(model: torch.nn.Module) -> bool:
    """Make every prefill forward of ``model`` run its vision tower, on a blank image when it has no images.

    Why: FSDP shards each vision block as its own unit, so the tower's forward (and backward) are collectives. A
    rank whose micro-batch or generate batch holds no image would skip them while its peers, whose batches do,
    wait in them. The blank image's output enters the hidden states times zero, so results are unchanged and the
    tower's gradients on such a rank are zeros, reduced with its peers' like any other. Decode steps (a KV cache
    already filled) never see images, on any rank, so they skip it. Upstream verl does the same for mixed
    text/image batches. Returns False for a model without a vision tower."""
    tower = vision_tower(model)
    owner = _parent_of_tower(model, tower) if tower is not None else None
    if owner is None:
        return False
    if getattr(owner, "_verl_vision_hooks", False):
        return True
    owner._verl_vision_hooks = True
    pending: list[torch.Tensor] = []

    def before(module, args, kwargs):
        shard = _SEQUENCE_PARALLEL_IMAGES.get()
        if shard is not None and kwargs.get("input_ids") is not None:  # Ulysses: this rank's slice, images in
            return args, dict(kwargs, input_ids=None, inputs_embeds=_local_embeds_with_images(module, shard))
        if kwargs.get("pixel_values") is not None or kwargs.get("pixel_values_videos") is not None:
            return
        cache = kwargs.get("past_key_values")
        if cache is not None and hasattr(cache, "get_seq_length") and cache.get_seq_length() > 0:
            return
        pending.append(_tower_on_blank_image(tower))  # before the language model: the same collective order

    def after(module, args, kwargs, output):
        if not pending:
            return output
        blank = pending.pop()
        if isinstance(output, tuple):
            return (output[0] + 0.0 * blank.to(output[0].dtype), *output[1:])
        output.last_hidden_state = output.last_hidden_state + 0.0 * blank.to(output.last_hidden_state.dtype)
        return output

    owner.register_forward_pre_hook(before, with_kwargs=True)
    owner.register_forward_hook(after, with_kwargs=True)
    language_model = getattr(owner, "language_model", None)
    if language_model is not None and "deepstack_visual_embeds" in inspect.signature(language_model.forward).parameters:
        language_model.register_forward_pre_hook(_with_local_deepstack, with_kwargs=True)
    return True


def _with_local_deepstack(module, args, kwargs):
    """Qwen3-VL under Ulysses: the language model receives this rank's slice of the deepstack features (the rows of
    the image tokens inside its window) and of the visual-position mask, which the VLM's forward cannot compute
    from the sliced embeddings it is given."""
    shard = _SEQUENCE_PARALLEL_IMAGES.get()
    if shard is None or shard.deepstack is None:
        return None
    mask, embeds = shard.deepstack
    return args, dict(kwargs, visual_pos_masks=mask, deepstack_visual_embeds=embeds)


@dataclasses.dataclass
class _ImageShard:
    input_ids: torch.Tensor  # (1, T + pad): the whole packed row, padded as the SP shards are
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.Tensor | None
    start: int
    width: int
    # Qwen3-VL: (this window's visual-position mask, its rows of each deepstack layer's features), set by the forward
    deepstack: tuple[torch.Tensor, list[torch.Tensor]] | None = None
    pixel_values_videos: torch.Tensor | None = None
    video_grid_thw: torch.Tensor | None = None


_SEQUENCE_PARALLEL_IMAGES: contextvars.ContextVar[_ImageShard | None] = contextvars.ContextVar(
    "verl_sequence_parallel_images", default=None)


@contextlib.contextmanager
def sequence_parallel_images(model: torch.nn.Module, input_ids: torch.Tensor, pad: int, start: int, width: int,
                             pixel_values: torch.Tensor | None, image_grid_thw: torch.Tensor | None,
                             pixel_values_videos: torch.Tensor | None = None,
                             video_grid_thw: torch.Tensor | None = None):
    """Ulysses with images (and videos): within the block, the VLM's forward on this rank's slice (``start``,
    ``width``) of the packed row ``input_ids`` (1, T) builds the embeddings of the whole row, the images' and videos'
    features scattered into their tokens (they may sit in any rank's slice), and runs the language model on its slice
    of them. Every rank of the SP group runs the vision tower on all of them; each rank's loss reaches the features
    of the tokens in its slice, so the gradients the group reduces add up to the whole row's."""
    enable_blank_image_forward(model)
    full = torch.nn.functional.pad(input_ids, (0, pad), value=0) if pad else input_ids
    token = _SEQUENCE_PARALLEL_IMAGES.set(_ImageShard(full, pixel_values, image_grid_thw, start, width,
                                                      pixel_values_videos=pixel_values_videos,
                                                      video_grid_thw=video_grid_thw))
    try:
        yield
    finally:
        _SEQUENCE_PARALLEL_IMAGES.reset(token)


def _scatter_features(embeds: torch.Tensor, tokens: torch.Tensor, output) -> tuple[torch.Tensor, list | None]:
    """``embeds`` with the vision tower's ``output`` in the positions of ``tokens``; its deepstack layers (Qwen3-VL)."""
    features = getattr(output, "pooler_output", output)
    if isinstance(features, (list, tuple)):
        features = torch.cat(list(features))
    embeds = embeds.masked_scatter(tokens[..., None].expand_as(embeds), features.to(embeds.dtype))
    deepstack = getattr(output, "deepstack_features", None)
    layers = [torch.cat(list(f)) if isinstance(f, (list, tuple)) else f for f in deepstack] if deepstack else None
    return embeds, layers


def _local_embeds_with_images(owner: torch.nn.Module, shard: _ImageShard) -> torch.Tensor:
    embeds = owner.get_input_embeddings()(shard.input_ids)
    parts = []  # (token mask, deepstack layers) per modality
    if shard.pixel_values is not None:
        tokens = shard.input_ids == owner.config.image_token_id
        embeds, layers = _scatter_features(embeds, tokens,
                                           owner.get_image_features(shard.pixel_values, shard.image_grid_thw))
        parts.append((tokens, layers))
    if shard.pixel_values_videos is not None:
        tokens = shard.input_ids == owner.config.video_token_id
        embeds, layers = _scatter_features(embeds, tokens, owner.get_video_features(shard.pixel_values_videos,
                                                                                    shard.video_grid_thw))
        parts.append((tokens, layers))
    window = slice(shard.start, shard.start + shard.width)
    if parts and all(layers for _, layers in parts):
        # Qwen3-VL: the deepstack rows of the vision tokens (images and videos joined in token order, as the model's
        # forward joins them) before and inside this window
        visual = parts[0][0]
        for tokens, _ in parts[1:]:
            visual = visual | tokens
        joint = []
        for depth in range(len(parts[0][1])):
            first = parts[0][1][depth]
            rows = first.new_zeros(int(visual.sum()), first.shape[-1])
            for tokens, layers in parts:
                rows[tokens[visual]] = layers[depth].to(rows.dtype)
            joint.append(rows)
        before = int(visual[:, : shard.start].sum())
        inside = int(visual[:, window].sum())
        shard.deepstack = (visual[:, window], [f[before: before + inside].to(embeds.dtype) for f in joint])
    return embeds[:, window]


# A response never holds a vision token: the model did not see an image there, and a sampled <|image_pad|> would
# give the actor's forward one more image token than the batch has image features ("Image features and image tokens
# do not match", a known upstream crash). So the rollout cannot sample them and the actor's log-probs use the same
# distribution. Finite, not -inf: the entropy's p·log p stays 0 and log-prob differences stay finite.
SUPPRESSED_LOGIT = -1.0e4


def vision_token_ids(config) -> list[int]:
    """The vision placeholder / delimiter token ids of a VLM config (image and video pads, vision start and end);
    empty for a text model."""
    if not is_vision_language_config(config):
        return []
    names = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
    return sorted({int(v) for v in (getattr(config, n, None) for n in names) if v is not None and int(v) >= 0})


def suppress_vision_tokens(logits: torch.Tensor, token_ids: list[int]) -> torch.Tensor:
    """``logits`` (..., V) with the vision tokens' entries set to SUPPRESSED_LOGIT (out of place, autograd-safe)."""
    if not token_ids:
        return logits
    ids = torch.tensor(token_ids, device=logits.device)
    return logits.index_fill(-1, ids, SUPPRESSED_LOGIT)
