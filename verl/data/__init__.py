"""Datasets for RL (prompts) and their loading helpers."""

from verl.data.rl_dataset import RLHFDataset, collate_fn
from verl.data.rl_loading import create_rl_dataset, create_rl_sampler

__all__ = ["RLHFDataset", "collate_fn", "create_rl_dataset", "create_rl_sampler"]
