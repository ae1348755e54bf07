"""Samplers that choose the next prompts from what training has seen: upstream's curriculum sampler interface.

A user's sampler subclasses ``AbstractCurriculumSampler`` and is named by ``data.sampler.class_path`` /
``class_name`` (a python file, or ``pkg://dotted.module``); ``create_rl_sampler`` builds it with
``(data_source=dataset, data_config=data_config)`` and the trainer calls ``update(batch)`` after every step.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sized
from typing import Any

from torch.utils.data import Sampler

__all__ = ["AbstractSampler", "AbstractCurriculumSampler"]


class AbstractSampler(Sampler[int]):
    """A sampler built from the dataset and the ``data`` config section."""

    @abstractmethod
    def __init__(self, data_source: Sized, data_config: Any) -> None: ...


class AbstractCurriculumSampler(AbstractSampler):
    """A sampler told about every trained batch, so it can change what it yields next.

    The dataloader prefetches, so ``update`` only affects indices not yet drawn: with a curriculum sampler
    ``data.dataloader_num_workers`` must be 0.
    """

    @abstractmethod
    def update(self, batch: Any) -> None:
        """Called by the trainer with the step's DataProto (rewards, advantages and all) after the updates."""
