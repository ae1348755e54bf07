"""Tiny model + tokenizer folders and small arithmetic SFT parquet files for the SFT tests (no downloads)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.helpers.tiny_model import tiny_llama
from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

ROOT = Path(__file__).resolve().parents[3]


def save_tiny_model(folder: Path, seed: int = 0) -> Path:
    """A random tiny Llama sized to the tiny tokenizer, saved with it as an HF folder."""
    tokenizer = build_tiny_tokenizer()
    model = tiny_llama(seed=seed, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                       eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def load_example(name: str):
    path = ROOT / "examples" / "data_preprocess" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"sft_test_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    return str(save_tiny_model(tmp_path_factory.mktemp("tiny_model")))


@pytest.fixture(scope="session")
def arithmetic_sft_files(tmp_path_factory) -> tuple[str, str]:
    """16 train / 8 test level-1 rows without the worked example (short prompts)."""
    out = tmp_path_factory.mktemp("arith_sft")
    return load_example("arithmetic_sft").main(
        ["--local_save_dir", str(out), "--train_size", "16", "--test_size", "8", "--no_fewshot"])
