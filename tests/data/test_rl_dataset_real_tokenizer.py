"""The bundled arithmetic data through RLHFDataset with the real default tokenizer (skipped until the
default model has been prepared)."""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from verl.data import RLHFDataset
from verl.trainer.config import DataConfig

MODEL_DIR = os.path.expanduser("~/.cache/verl/models/SmolLM2-135M-Instruct")
SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "data_preprocess" / "arithmetic.py"

pytestmark = pytest.mark.skipif(
    not os.path.isfile(os.path.join(MODEL_DIR, "tokenizer.json")), reason=f"default model not prepared at {MODEL_DIR}"
)


def test_arithmetic_prompts_with_smollm2_tokenizer(tmp_path):
    from transformers import AutoTokenizer

    spec = importlib.util.spec_from_file_location("preprocess_arithmetic_real", SCRIPT)
    arithmetic = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = arithmetic
    spec.loader.exec_module(arithmetic)
    train_path, _ = arithmetic.main(["--local_save_dir", str(tmp_path), "--train_size", "8", "--test_size", "2"])

    tokenizer = AutoTokenizer.from_pretrained(MODEL_DIR)
    config = DataConfig(max_prompt_length=256, truncation="error", filter_overlong_prompts=True)
    dataset = RLHFDataset(train_path, tokenizer, config)
    assert len(dataset) == 8  # the one-shot prompt fits 256 tokens
    item = dataset[0]
    n = len(item["raw_prompt_ids"])
    assert item["attention_mask"].sum().item() == n
    text = tokenizer.decode(item["input_ids"][-n:])
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert item["extra_info"]["question"] in text
    assert (item["input_ids"][: 256 - n] == tokenizer.pad_token_id).all()
