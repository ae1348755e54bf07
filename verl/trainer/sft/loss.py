"""The SFT objective on one micro-batch: summed next-token NLL over the trained positions, and their count.

The caller divides by the trained-token count of the whole global batch (all micro-batches, all ranks), so the
loss is a token mean that does not depend on how the batch is cut into micro-batches or ranks.

Two layouts give the same numbers:
- padded: the (bs, max_length) batch as the dataset built it, with its attention mask;
- packed (`use_remove_padding=true`): the real tokens of every row laid end to end in one row, positions
  restarting at 0 for each sample and no attention mask; transformers then builds a block-diagonal causal mask
  from the position ids, so samples do not see each other, and no compute is spent on padding.
- Ulysses (`ulysses_sequence_parallel_size` > 1, packed only): each rank of an SP group runs its slice of the
  packed row and returns its slice's share of the sum and count.

Image-text batches (verl/data/sft_vision.py) have (bs, 4, L) position ids (text positions, then the three mrope
rows), given to HF as (4, bs, L) padded or (4, 1, T) packed — HF's Qwen-VL reads row 0 to find the packed samples —
and their rows' `pixel_values` / `image_grid_thw` concatenated in row order, the order of their image tokens.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F

from verl.data.sft_vision import vision_forward_kwargs
from verl.models.lora import hf_module
from verl.models.packing import (
    PackedSequences,
    accepts_logits_to_keep,
    logits_at,
    pack_sequences,
    shard_for_sequence_parallel,
)
from verl.models.varlen_attention import packed_forward
from verl.models.vision import is_vision_language_config, sequence_parallel_images
from verl.utils.ulysses import ulysses_sequence_parallel

__all__ = ["trained_positions", "count_trained_tokens", "accepts_logits_to_keep", "padded_nll_sum", "pack",
           "packed_nll_sum", "sequence_parallel_nll_sum", "sft_nll_sum"]

BatchDict = dict[str, torch.Tensor]  # an image batch also holds its per-row MULTI_MODAL_INPUTS list


def trained_positions(batch: BatchDict) -> torch.Tensor:
    """loss_mask[:, :-1] restricted to positions whose next token is real (labels input_ids[:, 1:])."""
    return (batch["loss_mask"][:, :-1] * batch["attention_mask"][:, 1:]).bool()


def count_trained_tokens(batch: BatchDict) -> int:
    return int(trained_positions(batch).sum().item())


def _nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1), reduction="none")


def _masked_nll_sum(module: torch.nn.Module, input_ids: torch.Tensor, mask: torch.Tensor,
                    **inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """NLL of input_ids[:, t + 1] at the positions t where mask (bs, L - 1) is set.

    The LM head and softmax run only on columns some row trains (most prompt positions cost nothing there); at
    least one column is kept so every rank runs the same forward and backward (FSDP's collectives need that).
    """
    columns = torch.nonzero(mask.any(0)).flatten()
    if columns.numel() == 0:
        columns = columns.new_zeros(1)
    logits = logits_at(module, columns, input_ids=input_ids, use_cache=False, **inputs)
    kept = mask[:, columns].to(logits.dtype)
    nll = _nll(logits, input_ids[:, columns + 1]).view_as(kept)
    return (nll * kept).sum(), kept.sum()


def padded_nll_sum(module: torch.nn.Module, batch: BatchDict) -> tuple[torch.Tensor, torch.Tensor]:
    position_ids = batch["position_ids"]
    if position_ids.dim() == 3:  # a VLM's (bs, 4, L) -> HF's (4, bs, L)
        position_ids = position_ids.transpose(0, 1)
    return _masked_nll_sum(module, batch["input_ids"], trained_positions(batch),
                           attention_mask=batch["attention_mask"], position_ids=position_ids,
                           **vision_forward_kwargs(batch))


def _pack_with_loss_mask(batch: BatchDict) -> tuple[PackedSequences, torch.Tensor]:
    attention_mask = batch["attention_mask"].bool()
    lengths = attention_mask.sum(-1)
    if not torch.equal(attention_mask, torch.arange(attention_mask.size(1), device=lengths.device) < lengths[:, None]):
        raise ValueError("use_remove_padding=true needs right-padded samples (real tokens first, then padding); "
                         "the SFT datasets produce that — check a custom data.custom_cls dataset")
    # text-only batches: the packed positions restart per sample (cumsum of the mask, as the datasets make them);
    # image batches: their (bs, 4, L) mrope positions, packed to (4, 1, T)
    positions = batch.get("position_ids")
    positions = positions if positions is not None and positions.dim() == 3 else None
    packed = pack_sequences(batch["input_ids"], attention_mask, positions)
    loss_mask = batch["loss_mask"][attention_mask].clone()
    loss_mask[packed.cu_seqlens[1:].long() - 1] = 0
    return packed, loss_mask


def pack(batch: BatchDict) -> BatchDict:
    """One row holding every sample's real tokens, positions restarting per sample, and a loss mask in which
    the last token of each sample predicts nothing (its successor in the row is the next sample)."""
    packed, loss_mask = _pack_with_loss_mask(batch)
    return {"input_ids": packed.input_ids, "position_ids": packed.position_ids, "loss_mask": loss_mask[None]}


def packed_nll_sum(module: torch.nn.Module, batch: BatchDict) -> tuple[torch.Tensor, torch.Tensor]:
    packed = pack(batch)
    position_ids = packed["position_ids"]
    if position_ids.dim() == 2 and is_vision_language_config(getattr(hf_module(module), "config", None)):
        # text rows on a Qwen-VL model (a text file, a custom dataset): HF finds the packed samples only in the
        # text row of (4, 1, T) positions; with (1, T) the samples would attend to each other. A text token's three
        # mrope positions are its text position.
        position_ids = position_ids[None].expand(4, -1, -1)
    return _masked_nll_sum(module, packed["input_ids"], packed["loss_mask"][:, :-1].bool(),
                           position_ids=position_ids, attention_mask=None, **vision_forward_kwargs(batch))


def sequence_parallel_nll_sum(module: torch.nn.Module, batch: BatchDict,
                              group) -> tuple[torch.Tensor, torch.Tensor]:
    """Ulysses: the NLL sum and count over the trained positions of this rank's T/sp slice of the packed row.

    Every rank of the SP group holds the same micro-batch and runs the model on its own slice (the attention
    all-to-alls join the slices). The labels come from the whole row, so a slice's last position still predicts
    the first token of the next slice. Summed over the group's ranks these are the whole row's sum and count, and
    the sum of the ranks' gradients is the whole row's gradient: no gather of per-token losses is needed.
    """
    packed, loss_mask = _pack_with_loss_mask(batch)
    shard = shard_for_sequence_parallel(packed, group)
    images = vision_forward_kwargs(batch)
    # with images, every rank embeds the whole row with its image features and keeps its slice (as the RL actor)
    with_images = (sequence_parallel_images(module, packed.input_ids, shard.pad, shard.start, shard.width,
                                            images.get("pixel_values"), images.get("image_grid_thw"),
                                            images.get("pixel_values_videos"), images.get("video_grid_thw"))
                   if images else contextlib.nullcontext())
    trained = torch.nonzero(loss_mask[:-1]).flatten()
    mine = trained[(trained >= shard.start) & (trained < shard.start + shard.width)]
    count = mine.numel()
    # at least one column, so every rank runs the LM head and the whole backward (the all-to-alls need all ranks)
    columns = mine - shard.start if count else mine.new_zeros(1)
    with packed_forward(), ulysses_sequence_parallel(group), with_images:
        logits = logits_at(module, columns, use_cache=False, **shard.inputs)
    nll = _nll(logits[:, :count], packed.input_ids[:, mine + 1])
    return nll.sum(), torch.tensor(float(count), device=nll.device)


def sft_nll_sum(module: torch.nn.Module, batch: BatchDict, use_remove_padding: bool,
                ulysses_group=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(sum of NLL over trained tokens, number of trained tokens) of one micro-batch; with ``ulysses_group`` this
    rank's share of them (see sequence_parallel_nll_sum)."""
    if ulysses_group is not None:
        return sequence_parallel_nll_sum(module, batch, ulysses_group)
    if use_remove_padding:
        return packed_nll_sum(module, batch)
    return padded_nll_sum(module, batch)
