"""The actor/critic update loop's mini-batch labelling over DataProto's one iterator."""

from __future__ import annotations

import pytest
import torch

from verl.protocol import DataProto
from verl.workers.update_loop import enumerate_mini_batches


def _rows(n: int) -> DataProto:
    return DataProto.from_dict({"row": torch.arange(n)})


def _labelled(data: DataProto, size: int, epochs: int, shuffle: bool, seed: int = 0):
    return [(e, i, mini.batch["row"].tolist()) for e, i, mini in enumerate_mini_batches(data, size, epochs, shuffle,
                                                                                         seed)]


def test_in_order_with_a_smaller_last_mini_batch():
    # 5 rows in mini-batches of 2: each epoch ends with the odd row out, as upstream's data.split does
    assert _labelled(_rows(5), 2, 2, shuffle=False) == [
        (0, 0, [0, 1]), (0, 1, [2, 3]), (0, 2, [4]),
        (1, 0, [0, 1]), (1, 1, [2, 3]), (1, 2, [4]),
    ]


def test_shuffled_sequence_is_make_iterators_for_the_same_seed():
    data = _rows(8)
    labelled = _labelled(data, 4, 3, shuffle=True, seed=5)
    expected = [m.batch["row"].tolist() for m in data.make_iterator(4, 3, seed=5, dataloader_kwargs={"shuffle": True})]
    assert [rows for _, _, rows in labelled] == expected
    assert [(e, i) for e, i, _ in labelled] == [(e, i) for e in range(3) for i in range(2)]
    for epoch in range(3):  # every epoch visits every row once
        assert sorted(r for e, _, rows in labelled if e == epoch for r in rows) == list(range(8))


def test_mini_batch_size_must_be_a_positive_int():
    with pytest.raises(ValueError, match="ppo_mini_batch_size"):
        list(enumerate_mini_batches(_rows(4), 0, 1, False, 0))
