import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import verl.utils.torch_functional as F


def test_logprobs_from_logits_matches_log_softmax():
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 11)
    labels = torch.randint(0, 11, (3, 4))
    expected = torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(F.logprobs_from_logits(logits, labels), expected, atol=1e-6)


def test_logprobs_hand_example():
    # logits (0, ln 3): probs 1/4, 3/4
    logits = torch.tensor([[0.0, math.log(3.0)]])
    got = F.logprobs_from_logits(logits, torch.tensor([1]))
    assert got.item() == pytest.approx(math.log(0.75), abs=1e-6)


def test_logprobs_chunked_path_and_grad(monkeypatch):
    monkeypatch.setattr(F, "_CHUNK_ELEMENTS", 7)  # force one row per chunk
    torch.manual_seed(1)
    logits = torch.randn(2, 5, 6, requires_grad=True)
    labels = torch.randint(0, 6, (2, 5))
    got = F.logprobs_from_logits(logits, labels)
    ref_logits = logits.detach().clone().requires_grad_(True)
    expected = torch.log_softmax(ref_logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(got, expected, atol=1e-6)
    got.sum().backward()
    expected.sum().backward()
    assert torch.allclose(logits.grad, ref_logits.grad, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 9), vocab=st.integers(2, 13), chunk=st.integers(1, 40), seed=st.integers(0, 2**16),
       scale=st.floats(0.1, 30.0))
def test_logprobs_value_and_grad_match_log_softmax(rows, vocab, chunk, seed, scale):
    """Any row chunking, any upstream gradient: d/dz of sum_i g_i log softmax(z_i)[y_i] = g_i (onehot - softmax)."""
    import unittest.mock

    gen = torch.Generator().manual_seed(seed)
    logits = (scale * torch.randn(rows, vocab, generator=gen, dtype=torch.float64)).requires_grad_(True)
    labels = torch.randint(0, vocab, (rows,), generator=gen)
    upstream = torch.randn(rows, generator=gen, dtype=torch.float64)
    with unittest.mock.patch.object(F, "_CHUNK_ELEMENTS", chunk):
        got = F.logprobs_from_logits(logits, labels)
        (grad,) = torch.autograd.grad((got * upstream).sum(), logits)
    softmax = torch.softmax(logits.detach(), -1)
    expected = torch.log_softmax(logits.detach(), -1).gather(-1, labels[:, None]).squeeze(-1)
    onehot = torch.nn.functional.one_hot(labels, vocab).double()
    assert torch.allclose(got.double(), expected, atol=1e-5)
    assert torch.allclose(grad, upstream[:, None] * (onehot - softmax), atol=1e-6)


def test_logprobs_grad_of_a_non_contiguous_view():
    base = torch.randn(3, 8, 5, requires_grad=True)
    view = base.transpose(0, 1)[:, :2]  # (8, 2, 5), strided
    labels = torch.randint(0, 5, (8, 2))
    F.logprobs_from_logits(view, labels).sum().backward()
    ref = base.detach().clone().requires_grad_(True)
    torch.log_softmax(ref.transpose(0, 1)[:, :2], -1).gather(-1, labels[..., None]).sum().backward()
    assert torch.allclose(base.grad, ref.grad, atol=1e-6)


def test_logprobs_bf16_grad_is_bf16_and_close_to_float32():
    torch.manual_seed(3)
    logits = torch.randn(4, 64).bfloat16().requires_grad_(True)
    labels = torch.randint(0, 64, (4,))
    F.logprobs_from_logits(logits, labels).sum().backward()
    ref = logits.detach().float().requires_grad_(True)
    torch.log_softmax(ref, -1).gather(-1, labels[:, None]).sum().backward()
    assert logits.grad.dtype == torch.bfloat16
    # one bf16 rounding of g * (onehot - p): the label entry (near -1 + p) keeps ~3 significant digits
    assert torch.allclose(logits.grad.float(), ref.grad, atol=4e-3)


def test_entropy_grad_through_chunks(monkeypatch):
    monkeypatch.setattr(F, "_CHUNK_ELEMENTS", 5)
    torch.manual_seed(4)
    logits = torch.randn(6, 4, requires_grad=True)
    F.entropy_from_logits(logits).sum().backward()
    ref = logits.detach().clone().requires_grad_(True)
    logp = torch.log_softmax(ref, -1)
    (-(logp.exp() * logp).sum(-1)).sum().backward()
    assert torch.allclose(logits.grad, ref.grad, atol=1e-6)


def test_logprobs_bf16_returns_float32():
    logits = torch.randn(2, 3, 8).bfloat16()
    labels = torch.zeros(2, 3, dtype=torch.long)
    out = F.logprobs_from_logits(logits, labels)
    assert out.dtype == torch.float32
    assert torch.allclose(out, torch.log_softmax(logits.float(), -1)[..., 0], atol=1e-5)


def test_logprobs_shape_mismatch_names_shapes():
    with pytest.raises(ValueError, match="labels"):
        F.logprobs_from_logits(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))


def test_entropy_uniform_is_log_v():
    assert F.entropy_from_logits(torch.zeros(2, 3, 50)) == pytest.approx(torch.full((2, 3), math.log(50.0)))


def test_entropy_one_hot_is_zero_and_two_point():
    peaked = torch.tensor([[0.0, -1e4, -1e4]])
    assert F.entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-6)
    # probs 1/4, 3/4: H = -(1/4 ln 1/4 + 3/4 ln 3/4)
    two = torch.tensor([[0.0, math.log(3.0)]])
    expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert F.entropy_from_logits(two).item() == pytest.approx(expected, abs=1e-6)


def test_get_response_mask_hand_example():
    eos = 2
    responses = torch.tensor([
        [5, 6, 2, 7, 2],   # EOS at 2: keep 0..2
        [2, 5, 5, 5, 5],   # EOS first
        [5, 6, 7, 8, 9],   # no EOS: all kept
    ])
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    assert torch.equal(F.get_response_mask(responses, eos, dtype=torch.long), expected)


def test_get_response_mask_eos_list_and_dtype():
    responses = torch.tensor([[5, 9, 6, 2], [5, 6, 2, 9]])
    out = F.get_response_mask(responses, [2, 9], dtype=torch.float32)
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]))


def test_pad_2d_list_to_length():
    out = F.pad_2d_list_to_length([[1, 2], [3]], pad_token_id=0, max_length=4)
    assert torch.equal(out, torch.tensor([[1, 2, 0, 0], [3, 0, 0, 0]]))
    # max_length shorter than the longest row: the longest row wins
    assert F.pad_2d_list_to_length([[1, 2, 3]], 0, max_length=2).tolist() == [[1, 2, 3]]
    assert F.pad_2d_list_to_length([[1], [2, 3]], 9).tolist() == [[1, 9], [2, 3]]


def test_compute_position_id_with_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    expected = torch.tensor([[0, 0, 0, 1, 2, 2], [0, 1, 2, 3, 4, 5]])
    assert torch.equal(F.compute_position_id_with_mask(mask), expected)


def _lrs(scheduler, steps):
    out = []
    for _ in range(steps):
        out.append(scheduler.get_last_lr()[0])
        scheduler.optimizer.step()
        scheduler.step()
    return out


def _opt(lr=1.0):
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


def test_cosine_schedule_values():
    lrs = _lrs(F.get_cosine_schedule_with_warmup(_opt(), num_warmup_steps=2, num_training_steps=6), 7)
    # warmup 0, 1/2; then 0.5*(1+cos(pi*k/4)) for k = 0..4
    expected = [0.0, 0.5] + [0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(5)]
    assert lrs == pytest.approx(expected, abs=1e-9)


def test_cosine_schedule_min_lr_ratio():
    lrs = _lrs(F.get_cosine_schedule_with_warmup(_opt(), 0, 4, min_lr_ratio=0.1), 6)
    assert lrs[0] == pytest.approx(1.0)
    assert lrs[2] == pytest.approx(0.1 + 0.9 * 0.5)
    assert lrs[4] == pytest.approx(0.1) and lrs[5] == pytest.approx(0.1)


def test_constant_schedule_with_warmup():
    lrs = _lrs(F.get_constant_schedule_with_warmup(_opt(2.0), num_warmup_steps=4), 6)
    assert lrs == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.0])
    assert _lrs(F.get_constant_schedule_with_warmup(_opt(), 0), 2) == [1.0, 1.0]


def test_clip_grad_norm_returns_float_and_clips():
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, 4.0])
    norm = F.clip_grad_norm_([p], max_norm=1.0)
    assert isinstance(norm, float) and norm == pytest.approx(5.0)
    assert torch.allclose(p.grad, torch.tensor([0.6, 0.8]), atol=1e-5)


def test_clip_grad_norm_nonfinite_leaves_grads():
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([float("nan"), 1.0])
    norm = F.clip_grad_norm_([p], max_norm=1.0)
    assert math.isnan(norm)
    assert p.grad[1].item() == 1.0
    q = torch.nn.Parameter(torch.zeros(1))
    q.grad = torch.tensor([float("inf")])
    assert math.isinf(F.clip_grad_norm_([q], 1.0))


def test_clip_grad_norm_no_clip_and_no_grads():
    p = torch.nn.Parameter(torch.zeros(2))
    p.grad = torch.tensor([3.0, 4.0])
    assert F.clip_grad_norm_([p], max_norm=None) == pytest.approx(5.0)
    assert torch.equal(p.grad, torch.tensor([3.0, 4.0]))
    assert F.clip_grad_norm_([torch.nn.Parameter(torch.zeros(1))], 1.0) == 0.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=6), min_size=1, max_size=4))
def test_response_mask_property(rows):
    width = max(len(r) for r in rows)
    ids = F.pad_2d_list_to_length(rows, pad_token_id=3, max_length=width)
    mask = F.get_response_mask(ids, eos_token=0)
    for row, m in zip(ids.tolist(), mask.tolist()):
        cut = row.index(0) + 1 if 0 in row else len(row)
        assert m == [1] * cut + [0] * (len(row) - cut)
