"""Trainer keys that used to pass validation and do nothing: each test shows the key's effect.

The test names are referenced by the config audit (tests/trainer/config): keep them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.data.conftest import make_row, write_rows
from tests.workers.reward_manager.conftest import make_batch
from verl.data import RLHFDataset
from verl.protocol import DataProto
from verl.trainer.config import DataConfig, load_config, validate_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.reward import compute_reward, load_reward_manager
from verl.trainer.ppo.validation import Validator
from verl.utils import device

SAMPLES = [("Tom has 12", "#### 14", "14"), ("Anna has 9", "#### 10", "11"), ("Bo has 3", "#### 3", "3")]
# one worker and mini-batches of one prompt: validation passes with tiny batches
SMALL = ["trainer.n_gpus_per_node=1", "actor_rollout_ref.actor.ppo_mini_batch_size=1",
         "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1", "critic.ppo_mini_batch_size=1",
         "critic.ppo_micro_batch_size_per_gpu=1", "data.train_batch_size=2", "trainer.logger=[]"]


def typed(*overrides: str):
    return validate_config(load_config([*SMALL, *overrides]), check_files=False)


def make_trainer(*overrides: str, tokenizer=None, **kwargs) -> RayPPOTrainer:
    return RayPPOTrainer(typed(*overrides), tokenizer=tokenizer, role_worker_mapping={}, resource_pool_manager=None,
                         train_dataset=[{"x": i} for i in range(4)], collate_fn=lambda rows: rows, **kwargs)


def read_jsonl(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


# ---------------------------------------------------------------- trainer.device


def test_trainer_device_cpu_forces_cpu(monkeypatch):
    from verl.trainer.ppo.launcher import role_worker_mapping

    monkeypatch.setattr(device, "_cuda_present", lambda: True)  # a machine with a GPU
    monkeypatch.delenv(device.DEVICE_ENV, raising=False)
    device.set_device_preference(typed("trainer.device=auto").trainer.device)
    assert (device.get_device_name(), device.get_nccl_backend()) == ("cuda", "nccl")  # today's behaviour
    _, pools = role_worker_mapping(typed("trainer.device=auto"))
    assert pools.pool_kwargs == {}  # GPUs reserved when the cluster has them

    config = typed("trainer.device=cpu")
    device.set_device_preference(config.trainer.device)
    # what every worker process sees: the driver's environment is inherited or forwarded (RayWorkerGroup)
    assert os.environ[device.DEVICE_ENV] == "cpu"
    assert (device.get_device_name(), device.get_nccl_backend()) == ("cpu", "gloo")
    assert device.get_default_device() == torch.device("cpu")
    _, pools = role_worker_mapping(config)
    assert pools.pool_kwargs == {"use_gpu": False}  # and no GPU is reserved for them


def test_trainer_device_cuda_without_gpu_exits_2(tmp_path):
    data = write_rows(tmp_path / "train.parquet", [make_row("Tom has 1 apple.", index=0)])
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "verl.trainer.main_ppo", "trainer.device=cuda",
         f"data.train_files={data}", f"data.val_files={data}", f"hydra.run.dir={tmp_path / 'hydra'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    message = "\n".join(lines)
    assert proc.returncode == 2, message[-2000:]
    assert "trainer.device=cuda" in message and "no CUDA GPU" in message and "Traceback" not in message
    assert not {m for m in imported if m == "ray" or m.startswith("ray.")}  # refused before Ray


# ---------------------------------------------------------------- generations: logged and dumped


class _Tracker:
    def __init__(self) -> None:
        self.samples: list[tuple[int, list]] = []

    def log(self, data, step) -> None:
        pass

    def log_generations(self, samples, step) -> None:
        self.samples.append((step, samples))


class _RolloutGroup:
    """generate_sequences as a rollout returns it: the prompt, a fixed response per prompt, the full sequence."""

    def __init__(self, batch: DataProto) -> None:
        self.batch = batch

    def generate_sequences(self, gen: DataProto) -> DataProto:
        assert gen.meta_info["validate"] is True
        return self.batch.select(batch_keys=["prompts", "responses", "input_ids", "attention_mask"])


def _validator(tokenizer, config):
    batch, _ = make_batch(tokenizer, SAMPLES)
    prompt_len = batch.batch["prompts"].size(1)
    prompt_mask = batch.batch["attention_mask"][:, :prompt_len]
    rows = {"input_ids": batch.batch["prompts"], "attention_mask": prompt_mask,
            "position_ids": torch.cumsum(prompt_mask, -1), **batch.non_tensor_batch}
    validator = Validator(config, tokenizer, load_reward_manager(config, tokenizer, num_examine=0), [rows])
    validator.bind(_RolloutGroup(batch))
    return validator


def test_log_val_generations_logs_samples(tokenizer, capsys, tmp_path):
    from verl.trainer.tracking import GENERATIONS_FILE, Tracking

    trainer = make_trainer("trainer.log_val_generations=2", tokenizer=tokenizer)
    trainer.validator = _validator(tokenizer, trainer.config)
    trainer.tracker = Tracking("p", "e", default_backend=["console", "jsonl"], log_dir=str(tmp_path))
    trainer.global_steps = 3
    metrics = trainer._validate()
    trainer.tracker.finish()
    assert metrics["val-core/arithmetic/reward/mean@1"] == pytest.approx(2 / 3)
    (record,) = read_jsonl(tmp_path / GENERATIONS_FILE)
    assert record["step"] == 3 and len(record["samples"]) == 2
    by_input = {s[0]: (s[1], s[2]) for s in SAMPLES}
    for sample in record["samples"]:  # each logged sample is a real (input, output, score) of this validation
        response, truth = by_input[sample["input"]]
        assert sample["output"] == response and sample["score"] == (1.0 if response == f"#### {truth}" else 0.0)
    out = capsys.readouterr().out
    assert out.count("[val generation") == 2 and "[output] ####" in out

    quiet = make_trainer(tokenizer=tokenizer)  # the default, 0: nothing logged
    quiet.validator, quiet.tracker = _validator(tokenizer, quiet.config), _Tracker()
    quiet._validate()
    assert quiet.tracker.samples == []


def test_validation_data_dir_dumps_jsonl(tokenizer, tmp_path):
    config = typed(f"trainer.validation_data_dir={tmp_path / 'val'}")
    _validator(tokenizer, config).run(step=5)
    rows = read_jsonl(tmp_path / "val" / "5.jsonl")
    assert [(r["input"], r["output"], r["gts"], r["score"], r["step"]) for r in rows] == [
        ("Tom has 12", "#### 14", "14", 1.0, 5), ("Anna has 9", "#### 10", "11", 0.0, 5), ("Bo has 3", "#### 3", "3", 1.0, 5)]
    assert not (tmp_path / "val" / "0.jsonl").exists()
    _validator(tokenizer, typed()).run(step=6)  # the default, null: nothing written
    assert sorted(os.listdir(tmp_path / "val")) == ["5.jsonl"]


def test_rollout_data_dir_dumps_jsonl(tokenizer, tmp_path):
    trainer = make_trainer(f"trainer.rollout_data_dir={tmp_path / 'rollouts'}", tokenizer=tokenizer)
    batch, _ = make_batch(tokenizer, SAMPLES)
    reward_tensor, extra = compute_reward(batch, load_reward_manager(trainer.config, tokenizer, num_examine=0))
    batch.batch["token_level_scores"] = reward_tensor
    extra = {**extra, "acc": [True, False, True]}  # a reward extra info travels along
    trainer.global_steps = 2
    trainer._dump_rollouts(batch, extra)
    rows = read_jsonl(tmp_path / "rollouts" / "2.jsonl")
    assert [sorted(r) for r in rows] == [sorted(["input", "output", "gts", "score", "step", *extra])] * 3
    assert [(r["input"], r["output"], r["gts"], r["score"], r["step"], r["acc"]) for r in rows] == [
        ("Tom has 12", "#### 14", "14", 1.0, 2, True), ("Anna has 9", "#### 10", "11", 0.0, 2, False),
        ("Bo has 3", "#### 3", "3", 1.0, 2, True)]


# ---------------------------------------------------------------- reward_model.launch_reward_fn_async


@pytest.fixture(scope="module")
def local_ray():
    import ray

    from verl.utils.ray_utils import init_ray

    if ray.is_initialized():
        ray.shutdown()
    init_ray({"ray_init": {"object_store_memory": 200 * 1024**2, "log_to_driver": False}},
             run_dir="/tmp/vtk_ray", num_cpus=2)
    yield
    ray.shutdown()


def test_launch_reward_fn_async_matches_sync(tokenizer, local_ray):
    import ray

    sync = make_trainer(tokenizer=tokenizer)
    sync.reward_fn = load_reward_manager(sync.config, tokenizer, num_examine=0)
    batch, _ = make_batch(tokenizer, SAMPLES)
    started = sync._start_reward(batch)
    assert isinstance(started, tuple)  # scored on the spot
    want_tensor, want_extra = sync._finish_reward(started)

    trainer = make_trainer("reward_model.launch_reward_fn_async=true", tokenizer=tokenizer)
    trainer.reward_fn = sync.reward_fn
    future = trainer._start_reward(batch)
    assert isinstance(future, ray.ObjectRef)  # a Ray task runs while the log-prob passes would
    tensor, extra = trainer._finish_reward(future)
    assert torch.equal(tensor, want_tensor) and extra == want_extra
    assert tensor.sum(-1).tolist() == [1.0, 0.0, 1.0]


# ---------------------------------------------------------------- data keys


def _dataset_file(tmp_path, n=6):
    rows = [make_row("Tom has apples. " * (1 + 20 * (i % 2)), index=i) for i in range(n)]
    return write_rows(tmp_path / "train.parquet", rows)


def test_filter_overlong_prompts_workers(tokenizer, tmp_path, monkeypatch):
    import datasets

    calls = []
    real_map = datasets.Dataset.map

    def recording_map(self, *args, **kwargs):
        calls.append(kwargs.get("num_proc"))
        return real_map(self, *args, **kwargs)

    monkeypatch.setattr(datasets.Dataset, "map", recording_map)
    path = _dataset_file(tmp_path)
    config = DataConfig(max_prompt_length=64, filter_overlong_prompts=True, filter_overlong_prompts_workers=2)
    dataset = RLHFDataset(path, tokenizer, config)
    assert calls == [2]  # two processes tokenized the prompts
    assert [dataset[i]["index"] for i in range(len(dataset))] == [0, 2, 4]  # the long odd rows were dropped
    calls.clear()
    single = RLHFDataset(path, tokenizer, DataConfig(max_prompt_length=64, filter_overlong_prompts=True))
    assert calls == [None] and len(single) == 3  # the default, 1: in this process, same result


def test_return_raw_input_ids(tokenizer, tmp_path):
    path = write_rows(tmp_path / "train.parquet", [make_row("Tom has 12 apples.", index=0)])
    item = RLHFDataset(path, tokenizer, DataConfig(max_prompt_length=64, return_raw_input_ids=True))[0]
    # the prompt's own tokens, without the chat template (for a reward model with another template)
    assert item["raw_input_ids"] == tokenizer.encode("Tom has 12 apples.", add_special_tokens=False)
    assert item["raw_prompt_ids"] != item["raw_input_ids"]
    assert tokenizer.decode(item["raw_prompt_ids"]).startswith("<|im_start|>user\nTom has 12 apples.")
    assert "raw_input_ids" not in RLHFDataset(path, tokenizer, DataConfig(max_prompt_length=64))[0]


@pytest.fixture
def tokenizer():
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

    return build_tiny_tokenizer()


def test_generations_dump_writes_plain_json_values(tmp_path):
    """numpy scalars from the batch's object arrays become plain json values in the dump."""
    from verl.trainer.ppo.generations import Generations, dump_generations

    gens = Generations(inputs=["a"], outputs=["b"], scores=[np.float32(0.5)], gts=[np.int64(3)],
                       extra={"acc": [np.bool_(True)], "per_batch": [1, 2]})  # not one per sample: left out
    rows = read_jsonl(dump_generations(str(tmp_path), 1, gens))
    assert rows == [{"input": "a", "output": "b", "gts": 3, "score": 0.5, "step": 1, "acc": True}]
