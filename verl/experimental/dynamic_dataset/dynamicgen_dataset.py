"""Upstream's import path for dynamic data generation; the code lives in ``verl.data.dynamic_gen``."""

from verl.data.dynamic_gen import AbstractDataGenerator, DynamicGenDataset, MockDataGenerator

__all__ = ["AbstractDataGenerator", "DynamicGenDataset", "MockDataGenerator"]
