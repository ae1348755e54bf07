"""Datasets for RL (prompts) and SFT, and their loading helpers.

The names below load on first use: config checks import light modules of this package (verl.data.prompt_ids)
and must not pay for torch and pandas.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from verl.data.rl_dataset import RLHFDataset, collate_fn
    from verl.data.rl_loading import create_rl_dataset, create_rl_sampler

_WHERE = {"RLHFDataset": "rl_dataset", "collate_fn": "rl_dataset", "create_rl_dataset": "rl_loading",
          "create_rl_sampler": "rl_loading"}

__all__ = ["RLHFDataset", "collate_fn", "create_rl_dataset", "create_rl_sampler"]


def __getattr__(name: str):
    if name in _WHERE:
        return getattr(importlib.import_module(f"verl.data.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
