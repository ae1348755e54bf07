"""Shared pieces for whole-run tests: a tiny random Llama that speaks the default model's tokenizer, tiny
arithmetic parquet data, and a composed trainer config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


def default_tokenizer_dir() -> Path:
    from verl.utils.default_model import _is_ready, _target_dir

    path = _target_dir()
    if not _is_ready(path):
        pytest.skip("default model not prepared (run `make setup`)")
    return path


def make_tiny_model_dir(out: Path, seed: int = 0) -> Path:
    """A 2-layer random Llama with the default tokenizer's vocabulary, saved as an HF folder."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok_dir = default_tokenizer_dir()
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def make_arithmetic_data(out: Path, train_size: int = 32, test_size: int = 8, difficulty: int = 1) -> Path:
    subprocess.run([sys.executable, str(REPO / "examples/data_preprocess/arithmetic.py"), "--local_save_dir", str(out),
                    "--train_size", str(train_size), "--test_size", str(test_size), "--difficulty", str(difficulty),
                    "--no_fewshot"], check=True, capture_output=True)
    return out


def tiny_run_overrides(model_dir: Path, data_dir: Path, run_dir: Path, adv_estimator: str = "grpo",
                       n_workers: int = 2) -> list[str]:
    return [
        f"data.train_files={data_dir / 'train.parquet'}", f"data.val_files={data_dir / 'test.parquet'}",
        "data.train_batch_size=4", "data.max_prompt_length=128", "data.max_response_length=8",
        f"actor_rollout_ref.model.path={model_dir}", "actor_rollout_ref.rollout.n=2",
        f"algorithm.adv_estimator={adv_estimator}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.optim.lr=1e-2", "critic.optim.lr=1e-2",
        "critic.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        f"trainer.n_gpus_per_node={n_workers}", "trainer.total_training_steps=2", "trainer.test_freq=-1",
        "trainer.val_before_train=false", "trainer.logger=[console]", f"trainer.default_local_dir={run_dir}",
        "ray_kwargs.ray_init.num_cpus=4",
    ]


def fit_run(overrides: list[str], body=None) -> list[dict]:
    """Build the trainer as main_ppo does, start its workers, train (`body(trainer)` instead of `trainer.fit()` when
    given: it wraps stages, calls fit, probes after), and return the per-step metric rows; the tracker and Ray are
    closed whatever happens."""
    import ray

    from verl.trainer.config import validate_config
    from verl.trainer.config.validate import load_config
    from verl.trainer.ppo.launcher import build_trainer

    trainer, tracker, report_dir = build_trainer(validate_config(load_config(overrides)))
    try:
        trainer.init_workers()
        if body is None:
            trainer.fit()
        else:
            body(trainer)
    finally:
        tracker.finish()
        ray.shutdown()
    return train_step_rows(report_dir)


def train_step_rows(report_dir: str | Path) -> list[dict]:
    """The rows of a run's metrics.jsonl that a training step wrote (validation-only rows have no actor loss)."""
    rows = [json.loads(line) for line in (Path(report_dir) / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "actor/pg_loss" in r]
