"""SFT datasets and loaders: which dataset class a config asks for, and rank-aware stateful data loaders."""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
import warnings
from typing import Any

from torch.utils.data import Dataset, DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from verl.data.multiturn_sft_dataset import MultiTurnSFTDataset
from verl.data.sft_dataset import SFTDataset
from verl.data.sft_vision import collate_sft_batch
from verl.trainer.config.sft import SFTDataConfig


def _custom_class(path: str, name: str) -> type:
    local = os.path.expanduser(path)
    if not os.path.isfile(local):
        raise FileNotFoundError(f"data.custom_cls.path={path!r}: no such file")
    spec = importlib.util.spec_from_file_location(f"verl_custom_sft_dataset_{abs(hash(local))}", local)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    if not hasattr(module, name):
        raise AttributeError(f"data.custom_cls.name={name!r}: {path} defines no such class")
    cls = getattr(module, name)
    if not (isinstance(cls, type) and issubclass(cls, Dataset)):
        raise TypeError(f"data.custom_cls: {path}:{name} must be a torch.utils.data.Dataset subclass")
    return cls


def _takes_processor(cls: type) -> bool:
    try:
        return "processor" in inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return False


def create_sft_dataset(data_paths, data_config: SFTDataConfig, tokenizer: Any, processor: Any = None,
                       max_samples: int = -1) -> Dataset:
    """data.custom_cls when set, else MultiTurnSFTDataset with data.multiturn.enable, else SFTDataset (upstream's
    signature). ``processor``: the model folder's multi-modal processor (None for a text-only model); the datasets
    use it for a data.image_key column, and a custom class gets it when its constructor takes ``processor``."""
    custom = data_config.custom_cls
    if custom.path:
        cls = _custom_class(custom.path, custom.name or "")
        if processor is not None and _takes_processor(cls):
            return cls(data_paths, tokenizer, data_config, processor=processor)
        return cls(data_paths, tokenizer, data_config)
    cls = MultiTurnSFTDataset if data_config.multiturn.enable else SFTDataset
    return cls(data_paths, tokenizer, data_config, max_samples=max_samples, processor=processor)


def build_dataloader(dataset: Dataset, batch_size: int, rank: int, world_size: int, seed: int, shuffle: bool,
                     drop_last: bool) -> tuple[StatefulDataLoader, DistributedSampler]:
    """Each rank reads its own slice of every global batch; the order is the seed's, the same on resume. Batches
    are collated by verl.data.sft_vision.collate_sft_batch (image rows keep their pixel values per row).

    DistributedSampler gives rank r the samples r, r + W, r + 2W, ... of the epoch's permutation, so global batch
    k (the k-th local batch of every rank) is samples [k * B, (k + 1) * B) of it whatever the number of ranks W.
    """
    # torchdata calls a torch API torch now deprecates, once per loader; nothing a user can act on
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
                                 drop_last=drop_last)
    loader = StatefulDataLoader(dataset, batch_size=batch_size, sampler=sampler, num_workers=0, drop_last=drop_last,
                                collate_fn=collate_sft_batch)
    return loader, sampler
