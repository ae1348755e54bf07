"""verl.utils.torch_masked: reductions that ignore padding (used by core_algos and the workers)."""

import math

import pytest
import torch

from verl.utils.torch_masked import masked_mean, masked_sum, masked_var, masked_whiten


def test_masked_sum_and_mean_ignore_padding_even_if_it_is_inf():
    values = torch.tensor([[1.0, 2.0, float("inf")], [4.0, float("nan"), 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert masked_sum(values, mask).item() == pytest.approx(1 + 2 + 4)
    assert masked_mean(values, mask).item() == pytest.approx((1 + 2 + 4) / 3)
    # per row: (1 + 2) / 2 and 4 / 1
    torch.testing.assert_close(masked_mean(values, mask, axis=-1), torch.tensor([1.5, 4.0]))


def test_masked_mean_with_float_weights():
    values = torch.tensor([2.0, 4.0])
    weights = torch.tensor([0.25, 0.75])
    # (0.25 * 2 + 0.75 * 4) / (0.25 + 0.75) = 3.5
    assert masked_mean(values, weights).item() == pytest.approx(3.5)


def test_empty_mask_gives_zero_and_finite_gradient():
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    mask = torch.tensor([[0, 0], [1, 0]])
    row_means = masked_mean(values, mask, axis=-1)
    torch.testing.assert_close(row_means, torch.tensor([0.0, 3.0]))
    row_means.sum().backward()
    torch.testing.assert_close(values.grad, torch.tensor([[0.0, 0.0], [1.0, 0.0]]))


def test_masked_var_unbiased_and_biased():
    values = torch.tensor([1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([1, 1, 1, 0])
    # mean 2, squared deviations 1 + 0 + 1 = 2; unbiased 2 / (3 - 1) = 1, biased 2 / 3
    assert masked_var(values, mask).item() == pytest.approx(1.0)
    assert masked_var(values, mask, unbiased=False).item() == pytest.approx(2 / 3)


def test_masked_var_single_element_is_zero_and_empty_raises():
    assert masked_var(torch.tensor([5.0, 7.0]), torch.tensor([1, 0])).item() == 0.0
    with pytest.raises(ValueError, match="selects no element"):
        masked_var(torch.tensor([5.0]), torch.tensor([0]))


def test_masked_whiten_values():
    values = torch.tensor([[1.0, 2.0, 3.0, -50.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    # mean 2, unbiased var 1 -> (x - 2) / sqrt(1 + 1e-8); padding returned as 0
    scale = 1 / math.sqrt(1 + 1e-8)
    torch.testing.assert_close(masked_whiten(values, mask), torch.tensor([[-scale, 0.0, scale, 0.0]]))
    torch.testing.assert_close(
        masked_whiten(values, mask, shift_mean=False), torch.tensor([[2 - scale, 2.0, 2 + scale, 0.0]])
    )


def test_masked_whiten_constant_is_exactly_zero():
    values = torch.full((3, 4), 0.1)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    assert torch.equal(masked_whiten(values, mask), torch.zeros(3, 4))


def test_masked_whiten_empty_mask_and_shape_mismatch():
    assert torch.equal(masked_whiten(torch.ones(2, 2), torch.zeros(2, 2)), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="shape"):
        masked_mean(torch.ones(2, 3), torch.ones(2, 2))
