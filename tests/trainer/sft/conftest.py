"""Tiny model + tokenizer folders and small arithmetic SFT parquet files for the SFT tests (no downloads)."""

from __future__ import annotations

import pytest

from tests.trainer.sft.sft_helpers import load_example, save_tiny_model


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    return str(save_tiny_model(tmp_path_factory.mktemp("tiny_model")))


@pytest.fixture(scope="session")
def arithmetic_sft_files(tmp_path_factory) -> tuple[str, str]:
    """16 train / 8 test level-1 rows without the worked example (short prompts)."""
    out = tmp_path_factory.mktemp("arith_sft")
    return load_example("arithmetic_sft").main(
        ["--local_save_dir", str(out), "--train_size", "16", "--test_size", "8", "--no_fewshot"])
