"""Shared fixtures: the default config composed once, and tiny files to point data keys at."""

from __future__ import annotations

import copy
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import DictConfig

from verl.trainer.config import load_config


@pytest.fixture(scope="session")
def _default_cfg() -> DictConfig:
    return load_config([])


@pytest.fixture
def cfg(_default_cfg: DictConfig) -> DictConfig:
    """A fresh copy of the default composed config, safe to modify."""
    return copy.deepcopy(_default_cfg)


@pytest.fixture
def local_run_files(tmp_path: Path) -> dict[str, str]:
    """A train and a val parquet file and an (empty) model folder that exist."""
    table = pa.table({"prompt": ["Compute 1 + 1."], "data_source": ["arithmetic"]})
    paths = {"train": tmp_path / "train.parquet", "val": tmp_path / "val.parquet", "model": tmp_path / "model"}
    pq.write_table(table, paths["train"])
    pq.write_table(table, paths["val"])
    paths["model"].mkdir()
    return {k: str(v) for k, v in paths.items()}
