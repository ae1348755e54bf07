"""Packing by hand, round trips (hypothesis), per-segment attention against separate sequences."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.tiny_model import tiny_llama
from verl.models.packing import accepts_logits_to_keep, length_bucket, logits_at, pack_sequences, scatter_to_padded
from verl.models.varlen_attention import VARLEN_PREFIX, enable_varlen_attention, packed_forward


def test_pack_by_hand_left_and_right_padding():
    ids = torch.tensor([[0, 5, 6, 0], [7, 8, 9, 0], [0, 0, 0, 0]])
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    packed = pack_sequences(ids, mask)
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 9]]
    assert packed.position_ids.tolist() == [[0, 1, 0, 1, 2]]
    assert packed.cu_seqlens.tolist() == [0, 2, 5]  # the empty row has no segment
    assert packed.max_seqlen == 3 and packed.num_tokens == 5
    assert packed.token_index.tolist() == [[-1, 0, 1, -1], [2, 3, 4, -1], [-1, -1, -1, -1]]
    inputs = packed.model_inputs()
    assert inputs["attention_mask"] is None and inputs["cu_seq_lens_q"] is packed.cu_seqlens


def test_pack_keeps_given_position_ids_and_checks_shapes():
    ids = torch.tensor([[0, 5, 6]])
    mask = torch.tensor([[0, 1, 1]])
    assert pack_sequences(ids, mask, torch.tensor([[0, 0, 1]])).position_ids.tolist() == [[0, 1]]
    # multi-axis (a VLM's text + mrope rows, (bs, C, L)) pack to (C, 1, T), the layout HF's Qwen-VL takes
    axes = torch.tensor([[[9, 0, 1], [9, 2, 3], [9, 4, 5]]])
    assert pack_sequences(ids, mask, axes).position_ids.tolist() == [[[0, 1]], [[2, 3]], [[4, 5]]]
    with pytest.raises(ValueError, match="must be \\(batch, length\\) or \\(batch, axes, length\\)"):
        pack_sequences(ids, mask, torch.zeros(1, 3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="no real token"):
        pack_sequences(ids, torch.zeros_like(mask))


def test_pad_to_multiple_by_hand():
    """pad_to_length: the row is padded with id 0 up to the multiple, as one more segment counting from 0; the real
    tokens' ids, positions, segments and token_index are those of the unpadded packing."""
    ids = torch.tensor([[0, 5, 6, 0], [7, 8, 9, 0]])
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 0]])
    packed = pack_sequences(ids, mask, pad_to_multiple=4)
    assert packed.input_ids.tolist() == [[5, 6, 7, 8, 9, 0, 0, 0]]
    assert packed.position_ids.tolist() == [[0, 1, 0, 1, 2, 0, 1, 2]]
    assert packed.cu_seqlens.tolist() == [0, 2, 5, 8] and packed.max_seqlen == 3 and packed.num_tokens == 8
    assert packed.token_index.tolist() == pack_sequences(ids, mask).token_index.tolist()
    assert pack_sequences(ids, mask, pad_to_multiple=5).cu_seqlens.tolist() == [0, 2, 5]  # a multiple already
    wide = pack_sequences(ids, mask, pad_to_multiple=16)
    assert wide.num_tokens == 16 and wide.max_seqlen == 11  # the pad segment is the longest
    axes = torch.tensor([[[9, 0, 1, 9], [9, 2, 3, 9], [9, 4, 5, 9]]])
    mrope = pack_sequences(ids[:1], mask[:1], axes, pad_to_multiple=3).position_ids
    assert mrope.tolist() == [[[0, 1, 0]], [[2, 3, 0]], [[4, 5, 0]]]  # every axis of the pad counts from 0


def test_length_bucket_is_off_unless_set_and_divides_by_the_sp_size():
    from types import SimpleNamespace

    assert length_bucket(SimpleNamespace(pad_to_length=False, pad_to_length_bucket=8)) is None
    assert length_bucket(None) is None
    assert length_bucket(SimpleNamespace(pad_to_length=True, pad_to_length_bucket=8)) == 8
    assert length_bucket(SimpleNamespace(pad_to_length=True, pad_to_length_bucket=7), sp_size=2) == 8
    assert length_bucket(SimpleNamespace(pad_to_length=True, pad_to_length_bucket=1024), sp_size=3) == 1026


def test_scatter_to_padded_by_hand_and_grad():
    where = torch.tensor([[False, True, True], [True, False, False]])
    values = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    out = scatter_to_padded(values, where)
    assert out.tolist() == [[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]]
    (out * torch.tensor([[5.0, 6.0, 7.0], [8.0, 9.0, 10.0]])).sum().backward()
    assert values.grad.tolist() == [6.0, 7.0, 8.0]
    empty = scatter_to_padded(values[:0], torch.zeros(2, 3, dtype=torch.bool))
    assert empty.grad_fn is not None and not empty.any()
    with pytest.raises(ValueError, match="3 values for 1"):
        scatter_to_padded(values, torch.tensor([[True, False]]))


@st.composite
def padded_batches(draw):
    """(input_ids, attention_mask): a left pad, a contiguous block of real tokens, a right pad per row."""
    rows, width = draw(st.integers(1, 5)), draw(st.integers(1, 9))
    mask = torch.zeros(rows, width, dtype=torch.long)
    for r in range(rows):
        start = draw(st.integers(0, width))
        mask[r, start : draw(st.integers(start, width))] = 1
    if mask.sum() == 0:
        mask[0, 0] = 1
    ids = torch.arange(1, rows * width + 1).view(rows, width)  # distinct ids locate every token
    return ids, mask


@settings(max_examples=60, deadline=None)
@given(padded_batches())
def test_pack_round_trip(batch):
    ids, mask = batch
    packed = pack_sequences(ids, mask)
    real = mask.bool()
    # every real token once, in row-major order, and token_index points back to it
    assert packed.input_ids[0].tolist() == ids[real].tolist()
    assert torch.equal(packed.input_ids[0][packed.token_index[real]], ids[real])
    assert (packed.token_index[~real] == -1).all()
    # segments are the non-empty rows; positions count from 0 inside each
    lengths = [n for n in mask.sum(-1).tolist() if n > 0]
    assert torch.diff(packed.cu_seqlens).tolist() == lengths
    assert packed.position_ids[0].tolist() == [p for n in lengths for p in range(n)]
    # scattering per-token values back gives them at their own coordinates, zeros elsewhere
    restored = scatter_to_padded(packed.input_ids[0].float(), real)
    assert torch.equal(restored, (ids * mask).float())


def test_varlen_attention_equals_separate_sequences():
    torch.manual_seed(0)
    lengths = [3, 1, 4]
    q, k, v = torch.randn(1, 4, 8, 5), torch.randn(1, 2, 8, 5), torch.randn(1, 2, 8, 5)  # GQA: 4 heads, 2 kv
    module = tiny_llama().model.layers[0].self_attn
    name = enable_varlen_attention(tiny_llama())
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    out, _ = ALL_ATTENTION_FUNCTIONS[name](module, q, k, v, None, scaling=0.5,
                                           cu_seq_lens_q=torch.tensor([0, 3, 4, 8], dtype=torch.int32))
    start = 0
    for n in lengths:
        sl = slice(start, start + n)
        kk, vv = k[:, :, sl].repeat_interleave(2, dim=1), v[:, :, sl].repeat_interleave(2, dim=1)
        scores = (q[:, :, sl] @ kk.transpose(-1, -2)) * 0.5
        scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        expected = (F.softmax(scores, dim=-1) @ vv).transpose(1, 2)
        torch.testing.assert_close(out[:, sl], expected, rtol=1e-5, atol=1e-6)
        start += n


def test_varlen_attention_in_bf16_training_runs_its_core_in_fp32():
    """A bf16 training forward gets fp32 attention (the CPU kernel's bf16 backward is slow): its output and
    gradients are the fp32 computation's rounded once to bf16; a no-grad forward stays in bf16 throughout."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from verl.models.varlen_attention import _upcast_for_backward

    torch.manual_seed(0)
    cu = torch.tensor([0, 5, 7, 12], dtype=torch.int32)
    q32, k32, v32 = (torch.randn(1, h, 12, 8) for h in (4, 2, 2))
    module = tiny_llama().model.layers[0].self_attn
    attention = ALL_ATTENTION_FUNCTIONS[enable_varlen_attention(tiny_llama())]

    def run(dtype):
        q, k, v = (t.to(dtype).requires_grad_() for t in (q32, k32, v32))
        out, _ = attention(module, q, k, v, None, scaling=0.3, cu_seq_lens_q=cu)
        out.float().pow(2).sum().backward()
        return out, [t.grad for t in (q, k, v)]

    out16, grads16 = run(torch.bfloat16)
    assert out16.dtype == torch.bfloat16 and all(g.dtype == torch.bfloat16 for g in grads16)
    assert _upcast_for_backward(q32.to(torch.bfloat16).requires_grad_())
    # the same inputs (bf16 values) in fp32 end to end: the bf16 run differs only by the final rounding
    q, k, v = (t.to(torch.bfloat16).float().requires_grad_() for t in (q32, k32, v32))
    out, _ = attention(module, q, k, v, None, scaling=0.3, cu_seq_lens_q=cu)
    torch.testing.assert_close(out16.float(), out, rtol=1e-2, atol=1e-2)
    with torch.no_grad():
        assert not _upcast_for_backward(q32.to(torch.bfloat16))
        out_nograd, _ = attention(module, *(t.to(torch.bfloat16) for t in (q32, k32, v32)), None, scaling=0.3,
                                  cu_seq_lens_q=cu)
    assert out_nograd.dtype == torch.bfloat16
    assert not _upcast_for_backward(q32)  # fp32 already


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_enable_varlen_keeps_padded_forward_and_isolates_samples(attn):
    model = tiny_llama(seed=1)
    model.config._attn_implementation = attn
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 0]])
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0]])
    pos = torch.clamp(mask.cumsum(-1) - 1, min=0)
    with torch.no_grad():
        before = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        assert enable_varlen_attention(model) == VARLEN_PREFIX + attn
        assert enable_varlen_attention(model) == VARLEN_PREFIX + attn  # idempotent
        after = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        packed = pack_sequences(ids, mask)
        with packed_forward():
            packed_logits = model(**packed.model_inputs()).logits[0]
        # changing the second sample leaves the first sample's packed logits untouched
        ids2 = ids.clone()
        ids2[1, :4] = torch.tensor([20, 21, 22, 23])
        with packed_forward():
            other = model(**pack_sequences(ids2, mask).model_inputs()).logits[0]
    assert torch.equal(before, after)  # the padded path is delegated unchanged
    torch.testing.assert_close(packed_logits, before[mask.bool()], rtol=1e-5, atol=1e-5)
    assert torch.equal(packed_logits[:3], other[:3])


def test_packed_forward_without_cu_seqlens_is_refused():
    model = tiny_llama()
    enable_varlen_attention(model)
    packed = pack_sequences(torch.tensor([[5, 6, 7, 8]]), torch.tensor([[1, 1, 1, 1]]))
    with pytest.raises(RuntimeError, match="cu_seq_lens_q"), packed_forward():
        model(input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=None)


class _NoLogitsToKeep(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)


def test_logits_at_slices_when_logits_to_keep_is_missing():
    model = tiny_llama()
    wrapped = _NoLogitsToKeep(model)
    assert accepts_logits_to_keep(model) and not accepts_logits_to_keep(wrapped)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    positions = torch.tensor([1, 3])
    with torch.no_grad():
        full = model(input_ids=ids).logits
        torch.testing.assert_close(logits_at(model, positions, input_ids=ids), full[:, positions])
        torch.testing.assert_close(logits_at(wrapped, positions, input_ids=ids), full[:, positions])


def test_accepts_logits_to_keep_sees_through_peft():
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(tiny_llama(), peft.LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    assert accepts_logits_to_keep(model)
