"""Building the RL dataset and its sampler from the `data` config section (as verl's main_ppo does)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler, SequentialSampler

# torchdata's RandomSampler saves its generator with the dataloader state, so a mid-epoch resume replays the
# rest of the epoch in the same order (torch's does not).
from torchdata.stateful_dataloader.sampler import RandomSampler

from verl.data.curriculum import AbstractCurriculumSampler, AbstractSampler
from verl.data.rl_dataset import RLHFDataset
from verl.utils.import_utils import load_extern_object, load_extern_subclass


def _load_custom_dataset_cls(path: str, name: str | None) -> type:
    if not name:
        raise ValueError("data.custom_cls.name must name the dataset class in data.custom_cls.path")
    return load_extern_subclass("data.custom_cls", path, name, Dataset, "a torch.utils.data.Dataset subclass")


def _reads_datagen(dataset_cls: type) -> bool:
    from verl.data.dynamic_gen import DynamicGenDataset

    return issubclass(dataset_cls, DynamicGenDataset)


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
    datagen = getattr(data_config, "datagen", None)
    if (getattr(datagen, "path", None) or getattr(datagen, "name", None)) and not _reads_datagen(dataset_cls):
        raise ValueError(
            f"data.datagen.path={datagen.path!r} / name={datagen.name!r} is read only by DynamicGenDataset, and the "
            f"dataset class is {dataset_cls.__name__}: set data.custom_cls.path="
            "pkg://verl.experimental.dynamic_dataset.dynamicgen_dataset and data.custom_cls.name=DynamicGenDataset "
            "(or a subclass of it), or remove data.datagen")
    return dataset_cls(
        data_files=data_paths, tokenizer=tokenizer, config=data_config, processor=processor, max_samples=max_samples
    )


def _option(section: Any, key: str, default: Any = None) -> Any:
    if section is None:
        return default
    if isinstance(section, Mapping):
        return section.get(key, default)
    return getattr(section, key, default)


def _curriculum_sampler(data_config: Any, dataset: Dataset) -> Sampler | None:
    """The user's sampler from data.sampler.class_path / class_name, or None when no class_path is set."""
    section = _option(data_config, "sampler")
    class_path = _option(section, "class_path")
    if not class_path:
        return None
    class_name = _option(section, "class_name")
    sampler = load_extern_object(class_path, class_name)(data_source=dataset, data_config=data_config)
    if not isinstance(sampler, AbstractSampler):
        raise AssertionError(
            f"data.sampler: {class_path}:{class_name} must subclass "
            "verl.experimental.dataset.sampler.AbstractCurriculumSampler (or AbstractSampler)"
        )
    if isinstance(sampler, AbstractCurriculumSampler) and _option(data_config, "dataloader_num_workers", 0) != 0:
        raise AssertionError(
            "data.sampler is a curriculum sampler: set data.dataloader_num_workers=0, or prefetching workers draw "
            "indices before update() has seen the previous batch"
        )
    return sampler


def create_rl_sampler(data_config: Any, dataset: Dataset) -> Sampler:
    """The user's sampler (data.sampler.class_path), else a seeded random order when data.shuffle (seed
    data.seed, default 1 as upstream), else the file order."""
    custom = _curriculum_sampler(data_config, dataset)
    if custom is not None:
        return custom
    if _option(data_config, "shuffle", True):
        return RandomSampler(data_source=dataset, generator=_seeded(data_config))
    return SequentialSampler(data_source=dataset)


def create_val_sampler(data_config: Any, dataset: Dataset) -> Sampler:
    """The validation set's order: file order, or with data.validation_shuffle a random order drawn from its own
    generator seeded by data.seed, a new permutation each validation run (the same sequence of orders in every run
    of the same config). Every prompt is still generated and scored once per validation."""
    if _option(data_config, "validation_shuffle", False):
        return RandomSampler(data_source=dataset, generator=_seeded(data_config))
    return SequentialSampler(data_source=dataset)


def _seeded(data_config: Any) -> torch.Generator:
    seed = _option(data_config, "seed")
    return torch.Generator().manual_seed(1 if seed is None else int(seed))
