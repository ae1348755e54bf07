"""verl.workers.rollout.vllm_rollout.utils.build_cli_args_from_config (no vLLM needed)."""

from verl.workers.rollout.vllm_rollout.utils import build_cli_args_from_config


def test_each_value_kind():
    config = {
        "max_num_seqs": 128,
        "enforce_eager": True,
        "enable_prefix_caching": False,
        "quantization": None,
        "cuda-graph-sizes": [1, 2, 4],
        "skipped_list": [],
        "hf_overrides": {"rope_scaling": {"type": "yarn"}},
        "gpu_memory_utilization": 0.5,
        "seed": 0,
    }
    assert build_cli_args_from_config(config) == [
        "--max_num_seqs", "128",
        "--enforce_eager",
        "--cuda-graph-sizes", "1", "2", "4",
        "--hf_overrides", '{"rope_scaling": {"type": "yarn"}}',
        "--gpu_memory_utilization", "0.5",
        "--seed", "0",
    ]


def test_empty_config_gives_no_arguments():
    assert build_cli_args_from_config({}) == []
