"""Building the RL dataset and its sampler from the `data` config section (as verl's main_ppo does)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler, SequentialSampler

# torchdata's RandomSampler saves its generator with the dataloader state, so a mid-epoch resume replays the
# rest of the epoch in the same order (torch's does not).
from torchdata.stateful_dataloader.sampler import RandomSampler

from verl.data.rl_dataset import RLHFDataset


def _load_custom_dataset_cls(path: str, name: str | None) -> type:
    file_path = os.path.expanduser(path)
    if not os.path.isfile(file_path):
        raise FileNotFoundError(f"data.custom_cls.path={path!r}: no such file")
    if not name:
        raise ValueError("data.custom_cls.name must name the dataset class in data.custom_cls.path")
    module_name = "verl_custom_dataset_" + hashlib.sha1(os.path.abspath(file_path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(module_name, file_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise AttributeError(f"data.custom_cls.name={name!r} is not defined in {file_path}")
    cls = getattr(module, name)
    if not (isinstance(cls, type) and issubclass(cls, Dataset)):
        raise TypeError(f"data.custom_cls {name!r} in {file_path} must be a torch.utils.data.Dataset subclass")
    return cls


def create_rl_dataset(
    data_paths: str | list[str],
    data_config: Any,
    tokenizer: Any,
    processor: Any = None,
    is_train: bool = True,
    max_samples: int = -1,
) -> Dataset:
    """RLHFDataset, or the user's class from data.custom_cls.path/name (same constructor arguments).

    `data_config` is the typed `data` section (DataConfig). `is_train` is accepted for upstream's signature; pass
    data.train_max_samples / data.val_max_samples as `max_samples`.
    """
    custom = data_config.custom_cls
    dataset_cls = RLHFDataset
    if custom.path:
        dataset_cls = _load_custom_dataset_cls(custom.path, custom.name)
    return dataset_cls(
        data_files=data_paths, tokenizer=tokenizer, config=data_config, processor=processor, max_samples=max_samples
    )


def create_rl_sampler(data_config: Any, dataset: Dataset) -> Sampler:
    """Seeded random order when data.shuffle (seed data.seed), else the file order."""
    if data_config.shuffle:
        generator = torch.Generator()
        generator.manual_seed(data_config.seed)
        return RandomSampler(data_source=dataset, generator=generator)
    return SequentialSampler(data_source=dataset)
