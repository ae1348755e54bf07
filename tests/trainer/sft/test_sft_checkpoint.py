"""Checkpoint helpers: LoRA merge by hand, finding the newest checkpoint, resume_mode."""

from __future__ import annotations

import pytest
import torch

from verl.trainer.config.sft import SFTTrainerSection
from verl.trainer.sft.checkpoint import (
    LATEST_FILE,
    STATE_FILE,
    find_latest_checkpoint,
    merge_lora_weights,
    resolve_resume_dir,
)


def test_merge_lora_by_hand():
    prefix = "base_model.model.model.layers.0.mlp.up_proj"
    state = {
        f"{prefix}.base_layer.weight": torch.eye(2),
        f"{prefix}.base_layer.bias": torch.tensor([1.0, 2.0]),
        f"{prefix}.lora_A.default.weight": torch.tensor([[1.0, 0.0]]),  # r x in = 1 x 2
        f"{prefix}.lora_B.default.weight": torch.tensor([[1.0], [2.0]]),  # out x r = 2 x 1
        "base_model.model.lm_head.weight": torch.ones(3, 2),
    }
    merged = merge_lora_weights(state, scaling=0.5)
    # I + 0.5 * B @ A = I + 0.5 * [[1, 0], [2, 0]]
    assert merged["model.layers.0.mlp.up_proj.weight"].tolist() == [[1.5, 0.0], [1.0, 1.0]]
    assert merged["model.layers.0.mlp.up_proj.bias"].tolist() == [1.0, 2.0]
    assert set(merged) == {"model.layers.0.mlp.up_proj.weight", "model.layers.0.mlp.up_proj.bias", "lm_head.weight"}


def test_merge_refuses_adapters_it_cannot_merge():
    with pytest.raises(NotImplementedError, match="lora_embedding_A"):
        merge_lora_weights({"base_model.model.embed.lora_embedding_A.default": torch.ones(1)}, 1.0)


def _checkpoint(root, step):
    folder = root / f"global_step_{step}"
    folder.mkdir(parents=True)
    (folder / STATE_FILE).write_bytes(b"x")
    return folder


def test_latest_checkpoint_and_resume_modes(tmp_path):
    assert find_latest_checkpoint(str(tmp_path)) is None
    _checkpoint(tmp_path, 2)
    newest = _checkpoint(tmp_path, 10)
    (tmp_path / "global_step_12").mkdir()  # unfinished: no trainer state, ignored
    (tmp_path / ".tmp_global_step_14_123").mkdir()
    assert find_latest_checkpoint(str(tmp_path)) == str(newest)
    (tmp_path / LATEST_FILE).write_text("2")
    assert find_latest_checkpoint(str(tmp_path)).endswith("global_step_2")
    trainer = SFTTrainerSection(default_local_dir=str(tmp_path), resume_mode="disable")
    assert resolve_resume_dir(trainer) is None
    trainer.resume_mode = "auto"
    assert resolve_resume_dir(trainer).endswith("global_step_2")
    trainer.resume_mode = "resume_path"
    trainer.resume_from_path = str(newest)
    assert resolve_resume_dir(trainer) == str(newest)
    trainer.resume_from_path = str(tmp_path / "global_step_12")
    with pytest.raises(FileNotFoundError, match="trainer.resume_from_path"):
        resolve_resume_dir(trainer)
