"""verl.trainer.distillation.fsdp.utils.topk_logprobs_from_logits: which columns, in which order, and repeats."""

import math

import pytest
import torch

from verl.trainer.distillation.fsdp.utils import topk_logprobs_from_logits


def _logits():
    # row 0 ranks tokens 0 > 1 > 2 > ...; row 1 ranks 5 > 4 > 3 > ...
    return torch.tensor([[6.0, 5.0, 4.0, 3.0, 2.0, 1.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])


def test_own_topk_matches_log_softmax():
    values, columns = topk_logprobs_from_logits(_logits(), k=2, compute_topk=True)
    assert columns.tolist() == [[0, 1], [5, 4]]
    torch.testing.assert_close(values, torch.log_softmax(_logits(), -1).gather(-1, columns))


def test_gather_keeps_given_columns_in_order():
    given = torch.tensor([[3, 0], [2, 2]])
    values, columns = topk_logprobs_from_logits(_logits(), k=2, compute_topk=False, topk_indices=given)
    assert torch.equal(columns, given)
    torch.testing.assert_close(values, torch.log_softmax(_logits(), -1).gather(-1, given))


def test_both_sorted_by_index_and_repeats_count_once():
    given = torch.tensor([[1, 3], [0, 1]])
    values, columns = topk_logprobs_from_logits(_logits(), k=2, compute_topk=True, topk_indices=given)
    assert columns.tolist() == [[0, 1, 1, 3], [0, 1, 4, 5]]
    finite = torch.isfinite(values)
    assert finite.tolist() == [[True, False, True, True], [True, True, True, True]]
    full = torch.log_softmax(_logits(), -1)
    assert math.isclose(values[0, 2].item(), full[0, 1].item(), rel_tol=1e-6)


def test_nested_indices_are_flattened():
    given = torch.nested.nested_tensor([torch.tensor([[1, 2]]), torch.tensor([[3, 4]])], layout=torch.jagged)
    values, columns = topk_logprobs_from_logits(_logits(), k=2, compute_topk=False, topk_indices=given)
    assert columns.tolist() == [[1, 2], [3, 4]]
    assert values.shape == (2, 2)


def test_bad_widths_and_nothing_to_do_raise():
    with pytest.raises(ValueError, match=r"shape \[-1, 2\] or \[-1, 4\]"):
        topk_logprobs_from_logits(_logits(), k=2, compute_topk=False, topk_indices=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="needs topk_indices"):
        topk_logprobs_from_logits(_logits(), k=2, compute_topk=False)
