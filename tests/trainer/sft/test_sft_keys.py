"""Effects of sft_trainer.yaml keys on a tiny Llama: what each value changes in the data, the model, the run
length, the checkpoints, the tracker and the Ray launch."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.distributed as dist

from tests.helpers.tiny_model import tiny_llama
from tests.trainer.sft.sft_helpers import sft_config
from verl.trainer.config.sft import SFTModelConfig, SFTTrainerConfig
from verl.trainer.sft.checkpoint import STATE_FILE, list_checkpoints
from verl.trainer.sft.config import validate_sft_config
from verl.trainer.sft.model import add_lora, build_sft_module, hf_module
from verl.trainer.sft.trainer import _tracker, create_trainer, run_sft
from verl.utils.config_errors import ConfigError


@pytest.fixture(autouse=True)
def fresh_process_group():
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def _trainer(model_dir, files, out, *overrides):
    trainer = create_trainer(sft_config(model_dir, files, out, "trainer.resume_mode=disable", *overrides))
    dist.destroy_process_group()  # the next trainer of the test makes its own one-rank group
    return trainer


def test_max_samples_limit_the_datasets_and_the_epoch(tiny_model_dir, arithmetic_sft_files, tmp_path):
    full = _trainer(tiny_model_dir, arithmetic_sft_files, tmp_path / "a")
    cut = _trainer(tiny_model_dir, arithmetic_sft_files, tmp_path / "b", "data.train_max_samples=8",
                   "data.val_max_samples=3")
    assert (len(full.train_dataloader.dataset), len(full.val_dataloader.dataset)) == (16, 8)
    assert (len(cut.train_dataloader.dataset), len(cut.val_dataloader.dataset)) == (8, 3)
    assert (full.steps_per_epoch, cut.steps_per_epoch) == (4, 2)  # batch 4


def test_seed_sets_the_shuffle_order(tiny_model_dir, arithmetic_sft_files, tmp_path):
    def first_batch(seed: int, out: str) -> torch.Tensor:
        trainer = _trainer(tiny_model_dir, arithmetic_sft_files, tmp_path / out, f"trainer.seed={seed}")
        return next(iter(trainer.train_dataloader))["input_ids"]

    one = first_batch(1, "a")
    assert torch.equal(first_batch(1, "b"), one)
    assert not torch.equal(first_batch(2, "c"), one)


def test_model_keys_shape_the_module(tiny_model_dir, arithmetic_sft_files, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    trust_seen = []
    for cls in (AutoModelForCausalLM, AutoTokenizer):
        original = cls.from_pretrained

        def spy(*args, _original=original, **kwargs):
            trust_seen.append(kwargs.get("trust_remote_code"))
            return _original(*args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", spy)
    plain = _trainer(tiny_model_dir, arithmetic_sft_files, tmp_path / "a")
    assert trust_seen == [False, False]
    trust_seen.clear()
    changed = _trainer(tiny_model_dir, arithmetic_sft_files, tmp_path / "b", "model.trust_remote_code=true",
                       "model.enable_gradient_checkpointing=true", "+model.override_config.rms_norm_eps=0.5",
                       "model.gradient_checkpointing_policy=full")
    assert trust_seen == [True, True]  # tokenizer, then model
    assert hf_module(changed.fsdp_model).is_gradient_checkpointing
    layer_fn = hf_module(changed.fsdp_model).model.layers[0]._gradient_checkpointing_func
    assert "context_fn" not in layer_fn.keywords  # full, as asked (auto would be selective on this CPU)
    assert not hf_module(plain.fsdp_model).is_gradient_checkpointing
    assert hf_module(changed.fsdp_model).config.rms_norm_eps == 0.5
    ids = torch.tensor([[5, 17, 33, 9]])
    with torch.no_grad():  # same weights, a different norm epsilon: different logits
        assert not torch.allclose(plain.fsdp_model(input_ids=ids).logits, changed.fsdp_model(input_ids=ids).logits)


def test_external_lib_is_imported_before_the_model_loads(tmp_path, monkeypatch):
    (tmp_path / "verl_sft_test_extlib.py").write_text("raise RuntimeError('external_lib imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = SFTTrainerConfig()
    config.model.external_lib = "verl_sft_test_extlib"
    with pytest.raises(RuntimeError, match="external_lib imported"):
        build_sft_module(config, device_mesh=None)


def test_target_modules_choose_the_adapted_layers():
    def adapted(target) -> set[str]:
        module = add_lora(tiny_llama(), SFTModelConfig(lora_rank=2, target_modules=target))
        names = [name for name, _ in module.named_parameters() if ".lora_A." in name]
        return {name.split(".lora_A.")[0].rsplit(".", 1)[-1] for name in names}

    assert adapted(["q_proj"]) == {"q_proj"}
    assert adapted(["q_proj", "down_proj"]) == {"q_proj", "down_proj"}
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"} <= adapted("all-linear")


def test_run_length_checkpoints_and_report(tiny_model_dir, arithmetic_sft_files, tmp_path):
    # 8 samples / batch 4 = 2 steps per epoch, 2 epochs = 4 steps; a checkpoint every step, the newest 2 kept
    report = tmp_path / "my_report"
    summary = run_sft(sft_config(tiny_model_dir, arithmetic_sft_files, tmp_path / "ckpt", "data.val_files=null",
                                 "data.train_max_samples=8", "trainer.total_epochs=2", "trainer.save_freq=1",
                                 "trainer.max_ckpt_to_keep=2", "trainer.checkpoint.save_contents=[model]",
                                 f"trainer.report_dir={report}"))
    assert summary["global_step"] == 4
    assert [step for step, _ in list_checkpoints(str(tmp_path / "ckpt"))] == [3, 4]
    state = torch.load(tmp_path / "ckpt" / "global_step_4" / STATE_FILE, weights_only=False)
    assert state == {"global_step": 4}  # no optimizer, no schedule, no data position
    assert os.path.isfile(tmp_path / "ckpt" / "global_step_4" / "model.safetensors")
    assert json.loads((report / "summary.json").read_text())["global_step"] == 4
    with open(report / "metrics.jsonl") as f:
        assert [json.loads(line)["step"] for line in f] == [1, 2, 3, 4]
    assert not (tmp_path / "ckpt" / "report").exists()


def test_load_contents_chooses_what_a_resume_restores(tiny_model_dir, arithmetic_sft_files, tmp_path):
    run_sft(sft_config(tiny_model_dir, arithmetic_sft_files, tmp_path, "data.val_files=null",
                       "trainer.total_training_steps=2"))
    dist.destroy_process_group()

    def resumed(*overrides):
        trainer = create_trainer(sft_config(tiny_model_dir, arithmetic_sft_files, tmp_path, "data.val_files=null",
                                            "trainer.total_training_steps=4", *overrides))
        dist.destroy_process_group()
        return trainer

    everything = resumed()
    assert everything.global_step == 2 and len(everything.optimizer.state) > 0
    assert everything.lr_scheduler.last_epoch == 2
    weights_only = resumed("trainer.checkpoint.load_contents=[model]")
    assert weights_only.global_step == 2 and len(weights_only.optimizer.state) == 0
    assert weights_only.lr_scheduler.last_epoch == 0  # the schedule starts over


def test_tracker_gets_loggers_and_run_names(monkeypatch, tmp_path):
    from verl.trainer import tracking

    runs = []

    class Recorder:
        def __init__(self, project_name, experiment_name, config, log_dir=None):
            runs.append((project_name, experiment_name))

        def log(self, data, step):
            pass

        def finish(self):
            pass

    monkeypatch.setattr(tracking, "WandbBackend", Recorder)
    config = validate_sft_config({"trainer": {"logger": ["wandb"], "project_name": "p1", "experiment_name": "e1"}},
                                 world_size=1, check_files=False)
    tracker = _tracker(config, str(tmp_path))
    tracker.finish()
    assert runs == [("p1", "e1")] and list(tracker.logger) == ["wandb", "file"]
    config.trainer.logger = ["console"]
    tracker = _tracker(config, str(tmp_path))
    tracker.finish()
    assert list(tracker.logger) == ["console", "file"] and len(runs) == 1


def test_nnodes_multiplies_the_ranks(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ConfigError, match="data.train_batch_size=6 must be divisible by the 4 ranks"):
        validate_sft_config({"data": {"train_batch_size": 6, "micro_batch_size_per_gpu": 1},
                             "trainer": {"nnodes": 2, "n_gpus_per_node": 2}}, check_files=False)
    typed = validate_sft_config({"data": {"micro_batch_size": 8, "micro_batch_size_per_gpu": None},
                                 "trainer": {"nnodes": 2}}, check_files=False)
    assert typed.data.micro_batch_size_per_gpu == 4  # the deprecated global size over 2 nodes x 1 rank


def test_ray_init_reaches_ray(monkeypatch, tmp_path):
    from verl.trainer.sft.ray_launch import run_sft_on_ray
    from verl.utils import ray_utils

    seen = {}

    def fake_init_ray(ray_kwargs, run_dir=None, num_cpus=None):
        seen.update(ray_kwargs=ray_kwargs, run_dir=run_dir)
        raise RuntimeError("stop before the workers start")

    monkeypatch.setattr(ray_utils, "init_ray", fake_init_ray)
    config = validate_sft_config({"trainer": {"n_gpus_per_node": 2, "default_local_dir": str(tmp_path)},
                                  "ray_kwargs": {"ray_init": {"num_cpus": 3, "include_dashboard": False}}},
                                 world_size=2, check_files=False)
    with pytest.raises(RuntimeError, match="stop before"):
        run_sft_on_ray(config)
    assert seen == {"ray_kwargs": {"ray_init": {"num_cpus": 3, "include_dashboard": False}}, "run_dir": str(tmp_path)}
