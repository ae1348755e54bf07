"""Prefix grouping (upstream's ``actor.use_prefix_grouper``): the responses to one prompt share one pass of it.

GRPO samples n responses per prompt, and the padded forward runs the prompt n times. Grouped, each micro-batch's
rows with the same prompt become one row: the prompt's real tokens once, then each response's real tokens, one after
another (right-padded across groups). In attention each response sees the prompt and its own earlier tokens, never
another response; its position ids continue after the prompt exactly as in its own padded row. So the log-probs are
the padded path's, and the model runs on ``sum(prompt) + sum(responses)`` tokens per group instead of
``n x (prompt + response)``.

Rows are grouped by their prompt's content (real token ids and position ids), not by ``uid``: rows of one uid share
the prompt, and two uids with the same prompt may share it too. A group split across micro-batches is grouped in
each part, so the results never depend on the split, only the saving does.

The bookkeeping (which token of which row goes where) and the attention split (the prompt's causal attention once,
then each response against [prompt, itself]) are the ``prefix_grouper`` package's (``PrefixGrouper``), as upstream.
The attention core here is torch's sdpa with an explicit mask, so it runs on any device and dtype (upstream calls
flash-attention's varlen kernel, GPU only). ``enable_prefix_grouper_attention(model)`` registers it in front of the
model's own implementation; forwards without the grouper keyword (generation, the padded path) are delegated
unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["GroupedRows", "group_rows", "enable_prefix_grouper_attention", "grouped_forward", "PREFIX_GROUPER_KWARG",
           "PREFIX_GROUPER_IMPL_PREFIX", "PACKAGE_HINT"]

PREFIX_GROUPER_KWARG = "verl_prefix_grouper"  # the forward kwarg that carries the PrefixGrouper to each attention
PREFIX_GROUPER_IMPL_PREFIX = "verl_prefix_grouper_"
PACKAGE_HINT = "pip install prefix-grouper==0.0.1.post1"
_in_grouped_forward: contextvars.ContextVar[bool] = contextvars.ContextVar("verl_in_grouped_forward", default=False)


@dataclass(frozen=True)
class GroupedRows:
    """A (bs, P + R) prompt-left-padded / response-right-padded batch laid out as (G, L) grouped rows."""

    grouper: object  # prefix_grouper.PrefixGrouper
    input_ids: torch.Tensor  # (G, L): [prompt][response 1][response 2]... right-padded
    position_ids: torch.Tensor  # (G, L): the padded rows' own position ids at the same tokens
    group_sizes: list[int]
    targets: torch.Tensor  # (bs, R) bool: the real response tokens (row-major order of the flat results)
    predictor_rows: torch.Tensor  # (N,) grouped row whose logits predict each real response token
    predictor_cols: torch.Tensor  # (N,) position in that row

    @property
    def model_tokens(self) -> int:
        """Token positions the model runs on (padding included), to compare with the padded path's bs x (P + R)."""
        return int(self.input_ids.numel())


def _prefix_grouper_class():
    try:
        from prefix_grouper import PrefixGrouper
    except ImportError as exc:  # the pre-Ray check refuses the key without it; this is the direct-use message
        raise ImportError(f"actor.use_prefix_grouper needs the prefix_grouper package: {PACKAGE_HINT}") from exc
    return PrefixGrouper


def _check_padding(prompt_mask: torch.Tensor, response_mask: torch.Tensor) -> None:
    if bool((prompt_mask[:, 1:] < prompt_mask[:, :-1]).any()) or bool((response_mask[:, 1:] > response_mask[:, :-1]).any()):
        raise ValueError("use_prefix_grouper: expected left-padded prompts and right-padded responses (attention_mask "
                         "0 only at the ends of each row)")
    if bool((prompt_mask.sum(-1) == 0).any()):
        raise ValueError("use_prefix_grouper: a row has an empty prompt (no attention_mask 1 in its prompt part)")


def _groups(prompt_ids: torch.Tensor, prompt_pos: torch.Tensor, prompt_mask: torch.Tensor) -> list[list[int]]:
    """Row indices grouped by identical prompt (real ids and positions), groups in order of first appearance."""
    ids = torch.where(prompt_mask, prompt_ids, -1).tolist()
    pos = torch.where(prompt_mask, prompt_pos, -1).tolist()
    groups: dict[tuple, list[int]] = {}
    for row, key in enumerate(zip(map(tuple, ids), map(tuple, pos))):
        groups.setdefault(key, []).append(row)
    return list(groups.values())


def group_rows(input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
               response_length: int) -> GroupedRows:
    """Group the rows of a micro-batch by prompt (see the module doc)."""
    if position_ids.dim() != 2:
        raise NotImplementedError("use_prefix_grouper: multi-axis (mrope) position ids, i.e. a vision-language "
                                  "model, are not supported (as upstream); set actor_rollout_ref.actor."
                                  "use_prefix_grouper=false")
    prompt_length = input_ids.size(1) - response_length
    mask = attention_mask.bool()
    prompt_mask, response_mask = mask[:, :prompt_length], mask[:, prompt_length:]
    _check_padding(prompt_mask, response_mask)
    groups = _groups(input_ids[:, :prompt_length], position_ids[:, :prompt_length], prompt_mask)
    device = input_ids.device
    order = torch.tensor([row for members in groups for row in members], device=device)
    first = torch.tensor([members[0] for members in groups], device=device)
    sizes = [len(members) for members in groups]
    grouper = _prefix_grouper_class().from_ungrouped_masks(
        prefix_mask=prompt_mask[first], suffix_mask=response_mask[order], group_sizes=sizes, device=device,
        padding_mode="right")

    def concat(values: torch.Tensor) -> torch.Tensor:
        return grouper.concat_input(values[first, :prompt_length], prompt_mask[first],
                                    values[order, prompt_length:], response_mask[order])

    rows, cols = _predictors(groups, prompt_mask.sum(-1), response_mask, device)
    return GroupedRows(grouper, concat(input_ids), concat(position_ids), sizes, response_mask, rows, cols)


def _predictors(groups: list[list[int]], prompt_lens: torch.Tensor, response_mask: torch.Tensor,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """For each real response token (row-major): the grouped row and position whose logits predict it. The first
    token is predicted by the prompt's last token, token t > 0 by the response's own token t - 1."""
    lengths = response_mask.sum(-1).tolist()
    prompt_lens = prompt_lens.tolist()
    bs, width = response_mask.shape
    group_of, start = [0] * bs, [0] * bs
    for g, members in enumerate(groups):
        offset = prompt_lens[members[0]]
        for row in members:
            group_of[row], start[row] = g, offset
            offset += lengths[row]
    group_t = torch.tensor(group_of, device=device)
    start_t = torch.tensor(start, device=device)
    prompt_t = torch.tensor(prompt_lens, device=device)
    t = torch.arange(width, device=device)[None, :]
    cols = torch.where(t == 0, (prompt_t - 1)[:, None], start_t[:, None] + t - 1)
    rows = group_t[:, None].expand(bs, width)
    return rows[response_mask], cols[response_mask]


# -- attention --------------------------------------------------------------------------------------------------


def _masked_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_mask: torch.Tensor,
                 dropout_p: float = 0.0, scale: float | None = None) -> torch.Tensor:
    """Causal attention of the last ``s_q`` positions over ``s_k`` keys, real keys only (``key_mask`` (b, s_k)).

    The grouper calls it twice per layer: the prompts (left-padded, s_q == s_k), and the responses (right-padded,
    each against [its prompt, itself]: query i is key s_k - s_q + i). A padding query keeps its own key so its row is
    never empty (its output is discarded). query (b, Hq, s_q, D), key/value (b, Hkv, s_k, D) -> (b, s_q, Hq, D).
    """
    s_q, s_k = query.size(2), key.size(2)
    q_pos = torch.arange(s_q, device=query.device)[:, None] + (s_k - s_q)
    k_pos = torch.arange(s_k, device=query.device)[None, :]
    allowed = (key_mask.bool()[:, None, :] & (k_pos <= q_pos)) | (k_pos == q_pos)
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=allowed[:, None], dropout_p=dropout_p,
                                         scale=scale, enable_gqa=query.size(1) != key.size(1))
    return out.transpose(1, 2)


def _check_supported(module: torch.nn.Module, kwargs: dict) -> None:
    if kwargs.get("sliding_window") or getattr(module, "sliding_window", None):
        raise NotImplementedError(f"{type(module).__name__} uses a sliding attention window, which the prefix "
                                  "grouper's attention does not implement; set actor_rollout_ref.actor."
                                  "use_prefix_grouper=false for this model")
    if kwargs.get("softcap") or getattr(module, "attn_logit_softcapping", None) or hasattr(module, "sinks"):
        raise NotImplementedError(f"{type(module).__name__} uses logit softcapping / attention sinks, which the "
                                  "prefix grouper's attention does not implement; set actor_rollout_ref.actor."
                                  "use_prefix_grouper=false for this model")


def _base_attention(base: str):
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS[base]


def _make_attention(base: str):
    def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                  **kwargs):
        grouper = kwargs.pop(PREFIX_GROUPER_KWARG, None)
        if grouper is None or getattr(module, "is_causal", True) is False:
            if base == "eager":  # each model file has its own eager function (softcapping, sinks, ...)
                import sys

                eager = sys.modules[type(module).__module__].eager_attention_forward
                return eager(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
            return _base_attention(base)(module, query, key, value, attention_mask, dropout=dropout,
                                         scaling=scaling, **kwargs)
        _check_supported(module, kwargs)
        dropout_p = dropout if module.training else 0.0
        return grouper.forward(_masked_sdpa, query, key, value, dropout_p=dropout_p, scale=scaling), None

    attention.__name__ = f"{PREFIX_GROUPER_IMPL_PREFIX}{base}_attention"
    return attention


def _make_mask(base: str):
    def mask(*args, **kwargs):
        if _in_grouped_forward.get():
            return None  # the grouped attention builds its own masks; a (L, L) one would only cost memory
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

        return ALL_MASK_ATTENTION_FUNCTIONS[base](*args, **kwargs)

    return mask


def enable_prefix_grouper_attention(model: torch.nn.Module) -> str:
    """Put the grouped attention in front of ``model``'s own (idempotent); returns the implementation now in use.

    ``model``: an HF model, possibly peft- or FSDP-wrapped (the config is shared)."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        raise TypeError(f"use_prefix_grouper needs a transformers model with a config; got {type(model).__name__}")
    base = config._attn_implementation or "sdpa"
    if base.startswith(PREFIX_GROUPER_IMPL_PREFIX):
        return base
    from transformers.masking_utils import AttentionMaskInterface
    from transformers.modeling_utils import AttentionInterface

    name = f"{PREFIX_GROUPER_IMPL_PREFIX}{base}"
    if name not in AttentionInterface._global_mapping:
        AttentionInterface.register(name, _make_attention(base))
        AttentionMaskInterface.register(name, _make_mask(base))
    config._attn_implementation = name
    return name


@contextlib.contextmanager
def _grouped() -> Iterator[None]:
    token = _in_grouped_forward.set(True)
    try:
        yield
    finally:
        _in_grouped_forward.reset(token)


def grouped_forward(module: torch.nn.Module, rows: GroupedRows, use_logits_to_keep: bool, **kwargs) -> torch.Tensor:
    """Logits (N, V) at the predictors of the real response tokens (row-major over the padded batch), from one
    forward on the grouped rows. The LM head runs from the earliest predictor on (all when the module has no
    ``logits_to_keep``). ``kwargs``: more forward arguments."""
    length = rows.input_ids.size(1)
    first = int(rows.predictor_cols.min().item()) if rows.predictor_cols.numel() else length - 1
    keep = torch.arange(first, length, device=rows.input_ids.device)
    inputs = {"input_ids": rows.input_ids, "position_ids": rows.position_ids, "attention_mask": None,
              "use_cache": False, PREFIX_GROUPER_KWARG: rows.grouper, **kwargs}
    with _grouped():
        if use_logits_to_keep:
            logits = module(logits_to_keep=keep, **inputs).logits
        else:
            logits = module(**inputs).logits[:, first:]
    return logits[rows.predictor_rows, rows.predictor_cols - first]
