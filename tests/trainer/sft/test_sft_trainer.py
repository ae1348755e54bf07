"""The SFT trainer in this process on a tiny Llama: resume, LoRA, micro-batch invariance, HF checkpoints, config."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from tests.trainer.sft.sft_helpers import compose_sft, sft_config
from verl.trainer.config.sft import SFTTrainerConfig
from verl.trainer.fsdp_sft_trainer import create_trainer, run_sft
from verl.trainer.sft.argv import normalize_overrides
from verl.trainer.sft.checkpoint import LATEST_FILE, STATE_FILE
from verl.trainer.sft.config import validate_sft_config
from verl.utils.config_errors import ConfigError


@pytest.fixture(autouse=True)
def fresh_process_group():
    """Each test gets its own one-rank gloo group, torn down afterwards so other tests start clean."""
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def metrics_by_step(report_dir) -> dict[int, dict]:
    with open(report_dir / "metrics.jsonl") as f:
        return {row["step"]: row for row in map(json.loads, f)}


def test_resume_continues_exactly_where_it_stopped(tiny_model_dir, arithmetic_sft_files, tmp_path):
    # 16 samples / batch 4 = 4 steps per epoch; 6 steps cross into the second epoch; save at 3 (mid-epoch) and 6
    full = sft_config(tiny_model_dir, arithmetic_sft_files, tmp_path / "full", "trainer.total_training_steps=6",
                      "trainer.save_freq=3", "trainer.test_freq=3")
    summary = run_sft(full)
    assert summary["global_step"] == 6
    # the run report, as main_ppo's: metrics.csv, the loss curve (train every step, val at 3 and 6), summary
    report = tmp_path / "full" / "report"
    assert {"metrics.csv", "loss.png", "timing.png", "summary.json", "README.md"} <= set(summary["files"])
    assert all((report / name).is_file() for name in summary["files"])
    saved = json.loads((report / "summary.json").read_text())
    assert saved["global_step"] == 6 and saved["loss"]["val/loss"]["last_step"] == 6
    assert saved["loss"]["train/loss"]["last"] == pytest.approx(summary["train/loss"])
    assert (tmp_path / "full" / LATEST_FILE).read_text() == "6"
    state = torch.load(tmp_path / "full" / "global_step_3" / STATE_FILE, weights_only=True)
    assert state["global_step"] == 3 and state["epoch"] == 0 and state["steps_in_epoch"] == 3
    assert "optimizer" in state and "lr_scheduler" in state

    # a run that crashed after step 3: only that checkpoint exists
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copytree(tmp_path / "full" / "global_step_3", resumed_dir / "global_step_3")
    dist.destroy_process_group()
    resumed = sft_config(tiny_model_dir, arithmetic_sft_files, resumed_dir, "trainer.total_training_steps=6",
                         "trainer.save_freq=3", "trainer.test_freq=3")
    assert run_sft(resumed)["global_step"] == 6

    before, after = metrics_by_step(tmp_path / "full" / "report"), metrics_by_step(resumed_dir / "report")
    assert sorted(after) == [4, 5, 6]  # the resumed run only trained the missing steps
    for step in (4, 5, 6):
        assert after[step]["train/loss"] == pytest.approx(before[step]["train/loss"], rel=1e-5)
        assert after[step]["train/lr"] == pytest.approx(before[step]["train/lr"])
    a = load_file(tmp_path / "full" / "global_step_6" / "model.safetensors")
    b = load_file(resumed_dir / "global_step_6" / "model.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6)


def test_checkpoint_is_a_plain_hf_folder_main_ppo_can_load(tiny_model_dir, arithmetic_sft_files, tmp_path):
    from verl.models.loader import load_causal_lm, load_tokenizer
    from verl.workers.config import HFModelConfig

    run_sft(sft_config(tiny_model_dir, arithmetic_sft_files, tmp_path, "trainer.total_training_steps=1"))
    folder = str(tmp_path / "global_step_1")
    model, _ = load_causal_lm(HFModelConfig(path=folder), "actor_rollout_ref.model")
    tokenizer = load_tokenizer(folder, "actor_rollout_ref.model.path")
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.chat_template
    saved = load_file(f"{folder}/model.safetensors")
    for name, param in model.state_dict().items():
        if name in saved:
            torch.testing.assert_close(param, saved[name])
    with open(f"{folder}/config.json") as f:
        assert json.load(f)["use_cache"] is True


def test_lora_trains_only_the_adapter(tiny_model_dir, arithmetic_sft_files, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    config = sft_config(tiny_model_dir, arithmetic_sft_files, tmp_path, "model.lora_rank=4", "model.lora_alpha=8",
                        "optim.lr=5e-2", "trainer.total_training_steps=2")
    trainer = create_trainer(config)
    model = trainer.fsdp_model
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    trainer.fit()
    for name, param in model.named_parameters():
        changed = not torch.equal(before[name], param.detach())
        assert changed == (name in trainable), name
    # the merged checkpoint computes what the adapter model computes, and so does the saved adapter
    ids = torch.tensor([[5, 17, 33, 9, 60, 2, 11]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "global_step_2", dtype=torch.float32)
        torch.testing.assert_close(merged(input_ids=ids).logits, expected, rtol=1e-4, atol=1e-5)
        base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
        assert not torch.allclose(base(input_ids=ids).logits, expected, atol=1e-3)  # training did something
        adapter = PeftModel.from_pretrained(base, tmp_path / "global_step_2" / "lora_adapter")
        torch.testing.assert_close(adapter(input_ids=ids).logits, expected, rtol=1e-4, atol=1e-5)


def _first_step(config) -> tuple[float, dict[str, torch.Tensor]]:
    """(loss, gradients) of the first training step; the optimizer step is replaced by a recorder."""
    trainer = create_trainer(config)
    grads: dict[str, torch.Tensor] = {}

    def record(*args, **kwargs):
        for name, param in trainer.fsdp_model.named_parameters():
            grad = param.grad.full_tensor() if hasattr(param.grad, "full_tensor") else param.grad
            grads[name] = grad.detach().clone()

    trainer.optimizer.step = record
    metrics = trainer.training_step(next(iter(trainer.train_dataloader)))
    dist.destroy_process_group()
    return metrics["train/loss"], grads


def test_loss_is_a_global_token_mean_whatever_the_micro_batching(tiny_model_dir, arithmetic_sft_files, tmp_path):
    common = ["trainer.resume_mode=disable", "data.val_files=null", "optim.clip_grad=1e9"]
    runs = {
        "micro 1": ["data.micro_batch_size_per_gpu=1"],
        "micro 4": ["data.micro_batch_size_per_gpu=4"],
        "micro 2, packed": ["data.micro_batch_size_per_gpu=2", "use_remove_padding=true"],
    }
    results = {label: _first_step(sft_config(tiny_model_dir, arithmetic_sft_files, tmp_path / str(i), *extra, *common))
               for i, (label, extra) in enumerate(runs.items())}
    loss, grads = results["micro 1"]
    for label, (other_loss, other_grads) in results.items():
        assert other_loss == pytest.approx(loss, rel=1e-5), label
        for name in grads:
            torch.testing.assert_close(other_grads[name], grads[name], rtol=1e-4, atol=1e-7, msg=f"{label}: {name}")


def test_clip_grad_limits_the_gradient_norm(tiny_model_dir, arithmetic_sft_files, tmp_path):
    def step(clip: float) -> tuple[float, float]:
        config = sft_config(tiny_model_dir, arithmetic_sft_files, tmp_path / str(clip), "trainer.resume_mode=disable",
                            "data.val_files=null", f"optim.clip_grad={clip}")
        trainer = create_trainer(config)
        grads: list[torch.Tensor] = []
        trainer.optimizer.step = lambda *a, **k: grads.extend(
            p.grad.detach().clone() for p in trainer.fsdp_model.parameters() if p.grad is not None)
        metrics = trainer.training_step(next(iter(trainer.train_dataloader)))
        dist.destroy_process_group()
        return metrics["train/grad_norm"], float(torch.linalg.vector_norm(torch.stack(
            [torch.linalg.vector_norm(g.float()) for g in grads])))

    norm, stepped = step(1e9)
    assert stepped == pytest.approx(norm, rel=1e-4) and norm > 1e-2  # the reported norm is before clipping
    clipped_norm, clipped = step(1e-3)
    assert clipped_norm == pytest.approx(norm, rel=1e-4)
    assert clipped == pytest.approx(1e-3, rel=1e-3)  # the optimizer steps on gradients scaled to the limit


def test_config_problems_name_their_keys(tiny_model_dir, arithmetic_sft_files, tmp_path):
    config = compose_sft(tiny_model_dir, arithmetic_sft_files, tmp_path, "data.train_batch_size=6",
                         "data.micro_batch_size_per_gpu=4", "trainer.resume_mode=sometimes")
    with pytest.raises(ConfigError) as err:
        validate_sft_config(config, world_size=1)
    assert "trainer.resume_mode='sometimes' is not allowed" in str(err.value)
    config.trainer.resume_mode = "auto"
    with pytest.raises(ConfigError, match="data.train_batch_size / ranks = 6 must be divisible by "
                                          "data.micro_batch_size_per_gpu=4"):
        validate_sft_config(config, world_size=1)
    with pytest.raises(ConfigError, match="data.train_batch_size=6 must be divisible by the 4 ranks"):
        validate_sft_config(config, world_size=4)


def test_command_line_keys():
    # upstream's examples write +data.prompt_dict_keys=[...]; the key exists here, so the + is dropped
    assert normalize_overrides(["+data.prompt_dict_keys=[question]", "data.max_length=8"], SFTTrainerConfig,
                               "sft_trainer") == ["data.prompt_dict_keys=[question]", "data.max_length=8"]
    assert normalize_overrides(["+model.override_config.rope_theta=5"], SFTTrainerConfig, "sft_trainer") \
        == ["+model.override_config.rope_theta=5"]
    with pytest.raises(ConfigError, match="Did you mean 'data.micro_batch_size_per_gpu'"):
        normalize_overrides(["data.micro_batch_size_per_gpo=2"], SFTTrainerConfig, "sft_trainer")
    with pytest.raises(ConfigError, match=r"add it with '\+model.override_config.rope_theta=5'"):
        normalize_overrides(["model.override_config.rope_theta=5"], SFTTrainerConfig, "sft_trainer")
