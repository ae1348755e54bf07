"""Effects of single sft_trainer / generation / evaluation keys, each checked against hand-computed values."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from verl.trainer.config.generation import GenerationConfig
from verl.trainer.config.sft import SFTFSDPConfig, SFTOptimConfig
from verl.trainer.main_eval import run_eval, validate_eval_config
from verl.trainer.main_generation import _LocalWorkers, _RayWorkers, encode_prompts, worker_class
from verl.trainer.sft.config import validate_sft_config
from verl.utils.config_errors import ConfigError
from verl.workers.config import MixedPrecisionConfig
from verl.workers.fsdp_utils import build_lr_scheduler, build_optimizer, mixed_precision_policy


def _lrs(optim: SFTOptimConfig, steps: int) -> tuple[torch.optim.Optimizer, list[float]]:
    optimizer = build_optimizer(torch.nn.Linear(2, 2), optim.to_engine(steps), "optim")
    scheduler = build_lr_scheduler(optimizer, optim.to_engine(steps), "optim")
    lrs = []
    for _ in range(steps + 1):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return optimizer, lrs


def test_optim_keys_reach_optimizer_and_schedule():
    optimizer, lrs = _lrs(SFTOptimConfig(lr=0.1, betas=[0.5, 0.6], weight_decay=0.2, warmup_steps_ratio=0.2,
                                         lr_scheduler="cosine", min_lr_ratio=0.1), 10)
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.5, 0.6) and group["weight_decay"] == 0.2
    # warmup of floor(0.2 * 10) = 2 steps from min_lr_ratio * lr, then cosine down to min_lr_ratio * lr
    assert lrs[0] == pytest.approx(0.01) and lrs[1] == pytest.approx(0.055) and lrs[2] == pytest.approx(0.1)
    assert lrs[10] == pytest.approx(0.01)
    _, constant = _lrs(SFTOptimConfig(lr=0.1, warmup_steps_ratio=0.0, lr_scheduler="constant"), 10)
    assert constant == pytest.approx([0.1] * 11)


def test_fsdp_keys_reach_the_shared_fsdp_config():
    engine = SFTFSDPConfig(cpu_offload=True, reshard_after_forward=False, fsdp_size=2, model_dtype="bf16").to_engine()
    assert engine.param_offload and not engine.reshard_after_forward
    assert engine.fsdp_size == 2 and engine.model_dtype == "bf16"
    assert SFTFSDPConfig(offload_params=True).to_engine().param_offload
    assert not SFTFSDPConfig().to_engine().param_offload
    mixed = SFTFSDPConfig(mixed_precision=MixedPrecisionConfig(param_dtype="bf16", reduce_dtype="fp16")).to_engine()
    policy = mixed_precision_policy(mixed, warn=False)  # what apply_fsdp2 gives fully_shard
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float16)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_device_cuda_without_gpu_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="trainer.device=cuda but no GPU is visible"):
        validate_sft_config({"trainer": {"device": "cuda"}}, world_size=1, check_files=False)


def test_refused_sft_keys_name_the_key():
    with pytest.raises(ConfigError) as err:
        validate_sft_config({"model": {"use_liger": True},
                             "data": {"balance_dp_token": False}, "trainer": {"logger": ["clearml"]}},
                            world_size=1, check_files=False)
    text = str(err.value)
    for key in ("model.use_liger=True is refused",
                "data.balance_dp_token=False is refused", "trainer.logger='clearml' is refused"):
        assert key in text


def test_deprecated_micro_batch_size_is_divided_over_ranks():
    typed = validate_sft_config({"data": {"micro_batch_size": 8, "micro_batch_size_per_gpu": None,
                                          "train_batch_size": 16}}, world_size=2, check_files=False)
    assert typed.data.micro_batch_size_per_gpu == 4


def test_generation_sections_reach_the_worker_config():
    config = GenerationConfig()
    config.model.trust_remote_code = True
    config.model.override_config = {"rope_theta": 5.0}
    config.model.custom_chat_template = "{{ x }}"
    config.rollout.temperature, config.rollout.top_k, config.rollout.top_p = 0.5, 7, 0.9
    config.rollout.do_sample, config.rollout.prompt_length, config.rollout.response_length = False, 33, 44
    config.rollout.name, config.rollout.engine_kwargs = "vllm", {"vllm": {"swap_space": 1}}
    config.actor.fsdp_config.model_dtype, config.actor.fsdp_config.param_offload = "bf16", True
    config.actor.fsdp_config.reshard_after_forward = False
    config.actor.fsdp_config.mixed_precision.param_dtype = "bf16"
    worker = config.worker_config("/models/x")
    assert worker.model.path == "/models/x" and worker.model.trust_remote_code
    assert worker.model.override_config == {"rope_theta": 5.0} and worker.model.custom_chat_template == "{{ x }}"
    rollout = worker.rollout
    assert (rollout.name, rollout.temperature, rollout.top_k, rollout.top_p) == ("vllm", 0.5, 7, 0.9)
    assert (rollout.do_sample, rollout.prompt_length, rollout.response_length) == (False, 33, 44)
    assert rollout.engine_kwargs == {"vllm": {"swap_space": 1}}
    fsdp = worker.actor.fsdp_config
    assert fsdp.model_dtype == "bf16" and fsdp.param_offload and not fsdp.reshard_after_forward
    assert fsdp.mixed_precision.param_dtype == "bf16"
    assert worker.actor.strategy == config.actor.strategy


# the engine keys main_generation shares with main_ppo's rollout, with non-default values; build_rollout reads
# them from the RolloutConfig (their effects: tests/trainer/config/honoured_keys.py's rollout entries)
ENGINE_KEYS = {"dtype": "float32", "gpu_memory_utilization": 0.3, "enforce_eager": False, "free_cache_engine": False,
               "load_format": "auto", "tensor_model_parallel_size": 2, "max_num_batched_tokens": 123,
               "max_model_len": 77, "max_num_seqs": 5, "disable_log_stats": False, "enable_chunked_prefill": False}


def test_generation_engine_keys_reach_the_rollout():
    config = GenerationConfig()
    rollout = config.worker_config("/m").rollout
    assert {key: getattr(rollout, key) for key in ENGINE_KEYS} != ENGINE_KEYS  # the defaults differ
    for key, value in ENGINE_KEYS.items():
        setattr(config.rollout, key, value)
    rollout = config.worker_config("/m").rollout
    assert {key: getattr(rollout, key) for key in ENGINE_KEYS} == ENGINE_KEYS


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")
def test_generation_device_cuda_without_gpu_is_refused():
    from verl.trainer.main_generation import validate_generation_config

    with pytest.raises(ConfigError, match="trainer.device=cuda but no GPU is visible"):
        validate_generation_config({"trainer": {"device": "cuda"}})


def test_generation_imports_external_lib_before_loading(tmp_path, monkeypatch):
    from verl.trainer.main_generation import run_generation

    (tmp_path / "verl_gen_test_extlib.py").write_text("raise RuntimeError('external_lib imported')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    config = GenerationConfig()
    config.model.external_lib = "verl_gen_test_extlib"
    with pytest.raises(RuntimeError, match="external_lib imported"):
        run_generation(config)


def test_generation_ray_init_reaches_ray(tmp_path, monkeypatch):
    from verl.utils import ray_utils

    seen = {}

    def fake_init_ray(ray_kwargs, run_dir=None, num_cpus=None):
        seen.update(ray_kwargs=ray_kwargs, run_dir=run_dir)
        raise RuntimeError("stop before the workers start")

    monkeypatch.setattr(ray_utils, "init_ray", fake_init_ray)
    config = GenerationConfig()
    config.trainer.n_gpus_per_node = 2
    config.data.output_path = str(tmp_path / "out.parquet")
    config.ray_init = {"num_cpus": 3}
    with pytest.raises(RuntimeError, match="stop before"):
        _RayWorkers(config, "/m")
    assert seen == {"ray_kwargs": {"ray_init": {"num_cpus": 3}}, "run_dir": str(tmp_path)}


def test_generation_workers_follow_nnodes_and_gpus_per_node():
    config = GenerationConfig()
    assert worker_class(config) is _LocalWorkers
    config.trainer.n_gpus_per_node = 2
    assert worker_class(config) is _RayWorkers
    config.trainer.n_gpus_per_node, config.trainer.nnodes = 1, 2
    assert worker_class(config) is _RayWorkers


def test_generation_truncation_and_prompt_length():
    from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer()
    prompt = [{"role": "user", "content": "one two three four five six seven"}]
    full = encode_prompts([prompt], tokenizer, 512, "error", "prompt")
    length = int(full.batch["attention_mask"].sum())
    left = encode_prompts([prompt], tokenizer, length - 3, "left", "prompt")
    assert left.batch["input_ids"][0].tolist() == full.batch["input_ids"][0, 3:].tolist()
    with pytest.raises(ValueError):
        encode_prompts([prompt], tokenizer, length - 3, "error", "prompt")


def test_eval_column_keys_and_custom_function_name_and_kwargs(tmp_path):
    rows = [{"src": "a", "rm": {"ground_truth": "x"}, "gen": ["r1", "r2"]}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "g.parquet")
    (tmp_path / "fn.py").write_text("def my_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0):\n"
                                    "    return bonus + (solution_str == 'r1')\n")
    config = validate_eval_config({
        "data": {"path": str(tmp_path / "g.parquet"), "response_key": "gen", "data_source_key": "src",
                 "reward_model_key": "rm", "output_path": str(tmp_path / "o.json")},
        "custom_reward_function": {"path": str(tmp_path / "fn.py"), "name": "my_score",
                                   "reward_kwargs": {"bonus": 0.25}}})
    report = run_eval(config)
    assert report["per_data_source"]["a"]["test_score"] == pytest.approx((1.25 + 0.25) / 2)
    assert (tmp_path / "o.json").exists()


def test_refused_generation_and_eval_keys_name_the_key(tmp_path):
    from verl.trainer.main_generation import validate_generation_config

    with pytest.raises(ConfigError) as err:
        validate_generation_config({"rollout": {"n": 2, "name": "sglang"}, "actor": {"fsdp_config": {"fsdp_size": 2}}})
    text = str(err.value)
    assert "rollout.n=2 is refused" in text and "rollout.name='sglang' is refused" in text
    assert "actor.fsdp_config.fsdp_size=2 is refused" in text
    with pytest.raises(ConfigError, match="data.prompt_key='question' is refused"):
        validate_eval_config({"data": {"prompt_key": "question"}})
