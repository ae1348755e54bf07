"""Remove padding: lay the real tokens of a padded batch end to end in one row, and put results back.

A padded (bs, L) batch spends compute on every pad column; the packed layout holds only the tokens whose
``attention_mask`` is 1, row after row, in one (1, T) row. Position ids count the real tokens of each row from 0
(``cumsum(mask) - 1``, the same ids the padded path uses), so rotary embeddings see the same positions. Each row is
one segment of the packed row (``cu_seqlens``), so attention must stay inside segments: transformers does that
from the restarting position ids (a block-diagonal mask), or ``verl.models.varlen_attention`` per segment.

``token_index`` maps a padded coordinate (row, column) to its packed position (-1 on padding): the bridge for
picking which packed positions feed the LM head and for scattering per-token results back to (bs, ...) shape.

Upstream's ``pad_to_length`` / ``pad_to_length_bucket`` (engine keys): the packed row is padded at its end up to the
next multiple of the bucket, so the model sees a few fixed lengths instead of a new one every micro-batch (static
shapes for compilers and graph capture). The pad is one more segment of its own, so no real token attends to it and
every real token's result is unchanged; ``token_index`` never points into it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

__all__ = ["PackedSequences", "pack_sequences", "length_bucket", "scatter_to_padded", "accepts_logits_to_keep", "logits_at",
           "SequenceShard", "shard_for_sequence_parallel"]


@dataclass(frozen=True)
class PackedSequences:
    input_ids: torch.Tensor  # (1, T)
    position_ids: torch.Tensor  # (1, T), restarting at 0 for every row; (C, 1, T) for multi-axis (mrope) ids
    cu_seqlens: torch.Tensor  # (segments + 1,) int32: segment s is [cu_seqlens[s], cu_seqlens[s + 1])
    max_seqlen: int
    token_index: torch.Tensor  # (bs, L) long: packed position of each real token, -1 on padding

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.size(1))

    def model_inputs(self) -> dict:
        """Keyword arguments of an HF forward on the packed row.

        ``attention_mask=None`` makes transformers derive the segments from the position ids; the
        ``cu_seq_lens_*`` / ``max_length_*`` names are transformers' varlen kwargs, which flash attention and
        ``verl.models.varlen_attention`` read (other attention implementations ignore them).
        """
        return {"input_ids": self.input_ids, "position_ids": self.position_ids, "attention_mask": None,
                "cu_seq_lens_q": self.cu_seqlens, "cu_seq_lens_k": self.cu_seqlens,
                "max_length_q": self.max_seqlen, "max_length_k": self.max_seqlen}


@dataclass(frozen=True)
class SequenceShard:
    """One rank's share of a packed row under Ulysses sequence parallelism (``verl.utils.ulysses``)."""
    inputs: dict  # model kwargs: this rank's (1, T_pad/sp) ids and global position ids, the whole row's cu_seqlens
    start: int  # first packed position of this shard
    width: int  # tokens per rank (T_pad / sp)
    pad: int  # tokens added at the end of the row so sp divides it

    def local(self, positions: torch.Tensor) -> torch.Tensor:
        """Which of ``positions`` (packed, global) fall in this shard: a (width,) bool mask."""
        mask = torch.zeros(self.width, dtype=torch.bool, device=positions.device)
        inside = positions[(positions >= self.start) & (positions < self.start + self.width)]
        mask[inside - self.start] = True
        return mask


def shard_for_sequence_parallel(packed: PackedSequences, group) -> SequenceShard:
    """This rank's slice of ``packed`` padded to a multiple of the SP ``group``'s size; the pad is one more segment,
    so attention over the real tokens is unchanged. The inputs carry the group to the attention."""
    import torch.distributed as dist

    from verl.models.varlen_attention import ULYSSES_GROUP_KWARG
    from verl.utils.ulysses import ulysses_pad_and_slice_inputs

    sp_size, sp_rank = dist.get_world_size(group), dist.get_rank(group)
    input_ids, position_ids, pad = ulysses_pad_and_slice_inputs(packed.input_ids, packed.position_ids, sp_size,
                                                                sp_rank)
    cu_seqlens, max_seqlen = packed.cu_seqlens, packed.max_seqlen
    if pad:
        cu_seqlens = torch.cat([cu_seqlens, cu_seqlens.new_tensor([packed.num_tokens + pad])])
        max_seqlen = max(max_seqlen, pad)
    width = input_ids.size(1)
    inputs = {"input_ids": input_ids, "position_ids": position_ids, "attention_mask": None,
              "cu_seq_lens_q": cu_seqlens, "cu_seq_lens_k": cu_seqlens, "max_length_q": max_seqlen,
              "max_length_k": max_seqlen, ULYSSES_GROUP_KWARG: group}
    return SequenceShard(inputs=inputs, start=sp_rank * width, width=width, pad=pad)


def length_bucket(engine, sp_size: int = 1) -> int | None:
    """The multiple a packed row is padded up to under ``engine``'s (an fsdp_config's) ``pad_to_length``; None when it
    is off. Under Ulysses the bucket is rounded up to a multiple of the SP size, so the shards need no pad of their
    own (as upstream)."""
    if not getattr(engine, "pad_to_length", False):
        return None
    bucket = int(engine.pad_to_length_bucket)
    return -(-bucket // sp_size) * sp_size


def pack_sequences(input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   position_ids: torch.Tensor | None = None, pad_to_multiple: int | None = None) -> PackedSequences:
    """Pack the real tokens (``attention_mask == 1``) of a (bs, L) batch into one row.

    Rows may be left-, right- or both-side padded (RL batches: left-padded prompt + right-padded response).
    ``position_ids`` (bs, L), when given, are kept for the real tokens (they must count from 0 in every row, as
    ``compute_position_id_with_mask`` makes them); else they are ``cumsum(mask) - 1``. A row without real tokens
    contributes no segment. An all-padding batch raises: a forward needs at least one token.
    ``pad_to_multiple``: pad the row with token id 0 up to a multiple of it, as one more segment whose position ids
    count from 0 (``length_bucket``).
    """
    if input_ids.shape != attention_mask.shape or input_ids.dim() != 2:
        raise ValueError(f"pack_sequences: input_ids {tuple(input_ids.shape)} and attention_mask "
                         f"{tuple(attention_mask.shape)} must both be (batch, length)")
    mask = attention_mask.bool()
    lengths = mask.sum(-1)
    total = int(lengths.sum().item())
    if total == 0:
        raise ValueError("pack_sequences: attention_mask has no real token in this micro-batch")
    flat_index = torch.cumsum(mask.flatten().long(), 0) - 1
    token_index = torch.where(mask.flatten(), flat_index, torch.full_like(flat_index, -1)).view_as(input_ids)
    if position_ids is None:
        position_ids = torch.cumsum(mask.long(), -1) - 1
    if position_ids.dim() == 3 and position_ids.shape[::2] == input_ids.shape:
        # multi-axis (a VLM's text + mrope rows, (bs, C, L)): packed as (C, 1, T), the layout HF's Qwen-VL takes
        packed_positions = position_ids.transpose(0, 1)[:, mask][:, None]
    elif position_ids.shape == input_ids.shape:
        packed_positions = position_ids[mask][None]
    else:
        raise ValueError(f"pack_sequences: position_ids {tuple(position_ids.shape)} must be (batch, length) or "
                         f"(batch, axes, length) like input_ids {tuple(input_ids.shape)}")
    seg_lengths = lengths[lengths > 0]
    cu_seqlens = torch.zeros(seg_lengths.numel() + 1, dtype=torch.int32, device=input_ids.device)
    cu_seqlens[1:] = torch.cumsum(seg_lengths, 0)
    packed_ids, max_seqlen = input_ids[mask][None], int(seg_lengths.max().item())
    pad = -total % pad_to_multiple if pad_to_multiple else 0
    if pad:
        packed_ids = torch.cat([packed_ids, packed_ids.new_zeros(1, pad)], dim=1)
        pad_positions = torch.arange(pad, dtype=packed_positions.dtype, device=packed_positions.device)
        packed_positions = torch.cat([packed_positions, pad_positions.expand(*packed_positions.shape[:-1], pad)], -1)
        cu_seqlens = torch.cat([cu_seqlens, cu_seqlens.new_tensor([total + pad])])
        max_seqlen = max(max_seqlen, pad)
    return PackedSequences(input_ids=packed_ids, position_ids=packed_positions, cu_seqlens=cu_seqlens,
                           max_seqlen=max_seqlen, token_index=token_index)


def scatter_to_padded(values: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """A zero tensor shaped like ``where`` (bs, R) with ``values`` (K,) at its True entries, row-major.

    Differentiable in ``values`` (an out-of-place index_put), also when K is 0: the result still carries a
    grad_fn, so a loss on an all-padding micro-batch back-propagates zeros instead of failing.
    """
    if int(where.sum().item()) != values.numel():
        raise ValueError(f"scatter_to_padded: {values.numel()} values for {int(where.sum().item())} positions")
    out = values.new_zeros(where.shape)
    return out.index_put(torch.nonzero(where, as_tuple=True), values)


def accepts_logits_to_keep(module: torch.nn.Module) -> bool:
    """Whether the HF model (inside a peft wrapper too) can run its LM head on chosen positions only."""
    get_base = getattr(module, "get_base_model", None)
    target = get_base() if callable(get_base) and hasattr(module, "peft_config") else module
    try:
        return "logits_to_keep" in inspect.signature(target.forward).parameters
    except (TypeError, ValueError):
        return False


def logits_at(module: torch.nn.Module, positions: torch.Tensor, use_logits_to_keep: bool | None = None,
              **inputs) -> torch.Tensor:
    """Logits (rows, K, V) at sequence ``positions`` (K,) only, from an HF forward on ``inputs``.

    With ``logits_to_keep`` (an index tensor) the LM head — a (hidden x vocab) matmul per position, and the
    largest activation of the step — runs on those positions alone; modules without it compute all positions
    and are sliced. ``use_logits_to_keep`` caches the signature check (None: look it up).
    """
    if use_logits_to_keep is None:
        use_logits_to_keep = accepts_logits_to_keep(module)
    if use_logits_to_keep:
        return module(logits_to_keep=positions, **inputs).logits
    return module(**inputs).logits[:, positions]
