"""Tiny HF model folders and the example preprocess scripts, for the SFT and generation/eval tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir

from tests.helpers.tiny_model import tiny_llama
from tests.helpers.tiny_tokenizer import build_tiny_tokenizer
from verl.trainer.config.sft import SFTTrainerConfig
from verl.trainer.sft.argv import CONFIG_DIR
from verl.trainer.sft.config import validate_sft_config

ROOT = Path(__file__).resolve().parents[3]


def save_tiny_model(folder: Path, seed: int = 0, initializer_range: float = 0.02) -> Path:
    """A random tiny Llama sized to the tiny tokenizer, saved with it as an HF folder. With the default init its
    greedy output is one repeated token; initializer_range 0.3 makes different prompts give different text."""
    tokenizer = build_tiny_tokenizer()
    model = tiny_llama(seed=seed, vocab_size=len(tokenizer), initializer_range=initializer_range,
                       pad_token_id=tokenizer.pad_token_id,
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


def compose_sft(model_dir, files, out_dir, *overrides):
    train, test = files
    base = [f"model.partial_pretrain={model_dir}", f"data.train_files={train}", f"data.val_files={test}",
            "data.max_length=192", "data.train_batch_size=4", "data.micro_batch_size_per_gpu=2",
            "model.enable_gradient_checkpointing=false", "optim.lr=1e-3", "optim.warmup_steps_ratio=0",
            # fp32 and padded: the SFT tests compare losses and gradients to 1e-5 across micro-batchings; the
            # defaults (the hardware's dtype, packed) are compared with these in tests/workers/actor/test_memory_knobs
            "model.fsdp_config.mixed_precision.param_dtype=fp32", "use_remove_padding=false",
            f"trainer.default_local_dir={out_dir}", "trainer.logger=[]", "trainer.total_epochs=1"]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return compose(config_name="sft_trainer", overrides=base + list(overrides))


def sft_config(model_dir, files, out_dir, *overrides) -> SFTTrainerConfig:
    return validate_sft_config(compose_sft(model_dir, files, out_dir, *overrides), world_size=1)
