"""Reductions over the valid (mask != 0) entries of a tensor.

Padding must never change a result, so every helper here treats masked-out entries as absent: they are
replaced by zero *before* any arithmetic (a NaN or inf sitting on padding cannot leak into a sum through
``0 * inf``), and an empty mask gives 0 rather than 0/0. Masks may be bool, integer or float; a float mask
acts as per-entry weights.

Variance and whitening are computed in float64 and cast back: with float32 inputs this keeps the mean of
identical values exact, so a group of all-equal rewards whitens to exactly zero instead of amplified
rounding noise.
"""

from __future__ import annotations

import torch

__all__ = ["masked_sum", "masked_mean", "masked_var", "masked_whiten"]

# Added to the variance before the square root in whitening, so a constant batch divides by a small
# number instead of zero (its centred values are zero, so the result is zero).
WHITEN_EPS = 1e-8


def _check_shapes(values: torch.Tensor, mask: torch.Tensor) -> None:
    if values.shape != mask.shape:
        raise ValueError(
            f"values has shape {tuple(values.shape)} but mask has shape {tuple(mask.shape)}; "
            "pass a mask with exactly the shape of the values (e.g. response_mask for (batch, response_len))."
        )


def _zero_where_masked(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.bool(), values, torch.zeros((), dtype=values.dtype, device=values.device))


def _safe_divide(numer: torch.Tensor, denom: torch.Tensor) -> torch.Tensor:
    # Dividing by a placeholder 1 where the count is 0 (numer is 0 there) keeps both the value and the
    # gradient finite; `torch.where(denom > 0, numer / denom, 0)` would still back-propagate 0/0 = NaN.
    safe = torch.where(denom != 0, denom, torch.ones_like(denom))
    return numer / safe


def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Sum of ``values * mask`` over ``axis`` (all dims if None), ignoring whatever sits on padding."""
    _check_shapes(values, mask)
    weighted = _zero_where_masked(values, mask) * mask.to(values.dtype)
    return weighted.sum() if axis is None else weighted.sum(dim=axis)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: int | None = None) -> torch.Tensor:
    """Mean over the valid entries (weighted by a float mask); 0 where the mask selects nothing."""
    total = masked_sum(values, mask, axis)
    count = mask.to(values.dtype)
    count = count.sum() if axis is None else count.sum(dim=axis)
    return _safe_divide(total, count)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the valid entries (a 0-dim tensor).

    ``unbiased`` applies Bessel's correction n/(n-1). With a single valid entry there is no spread to
    estimate and the correction is undefined, so the result is 0 (the entry equals its own mean).
    Raises ValueError when the mask selects nothing.
    """
    _check_shapes(values, mask)
    v64 = values.to(torch.float64)
    m64 = mask.to(torch.float64)
    count = m64.sum()
    if not bool(count > 0):
        raise ValueError("masked_var: the mask selects no element; there is no variance to compute.")
    mean = masked_mean(v64, m64)
    centred = _zero_where_masked(v64 - mean, mask)
    var = masked_mean(centred.square(), m64)
    if unbiased:
        bessel = _safe_divide(count, count - 1)
        var = torch.where(count > 1, var * bessel, torch.zeros_like(var))
    return var.to(values.dtype)


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """(values - mean) / sqrt(var + 1e-8) with mean and (unbiased) variance over the valid entries.

    ``shift_mean=False`` adds the mean back (rescale only). Padding entries are returned as 0. An empty
    mask returns all zeros: there is no valid entry to whiten.
    """
    _check_shapes(values, mask)
    if not bool(mask.bool().any()):
        return torch.zeros_like(values)
    v64 = values.to(torch.float64)
    m64 = mask.to(torch.float64)
    mean = masked_mean(v64, m64)
    var = masked_var(v64, m64, unbiased=True)
    whitened = (v64 - mean) * torch.rsqrt(var + WHITEN_EPS)
    if not shift_mean:
        whitened = whitened + mean
    return _zero_where_masked(whitened, mask).to(values.dtype)
