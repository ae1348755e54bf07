"""benchmarks/gpu_throughput.py: without CUDA it exits 0 saying why; its measuring path (the same code the GPU run
takes, device picked by verl.utils.device) runs on one rank with a tiny model and reports consistent figures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_throughput.py"


def test_without_cuda_it_skips_with_the_reason_and_exits_0():
    env = {**os.environ, "VERL_DEVICE": "cpu"}  # hides any GPU from verl, so this is the skip path everywhere
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "gpu_throughput: skipped (VERL_DEVICE=cpu)" in done.stdout


def _measure_tiny(rank: int, results) -> None:
    import tempfile

    import torch
    import torch.distributed as dist

    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]
    import gpu_throughput

    torch.set_num_threads(1)
    args = gpu_throughput._args(["--hidden", "32", "--layers", "2", "--heads", "4", "--vocab", "128",
                                 "--dtype", "fp32", "--responses", "4", "--min-prompt-length", "4",
                                 "--max-prompt-length", "8", "--min-response-length", "2", "--max-response-length",
                                 "6", "--token-budget", "64", "--repeats", "1", "--peak-size", "128"])
    gpu_throughput._join_single_rank()  # nccl on a GPU box, gloo here: the script's own choice
    try:
        with tempfile.TemporaryDirectory() as folder:
            results[rank] = gpu_throughput.measure(args, gpu_throughput._built_model(args, folder))
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_measure_reports_tokens_per_second_and_mfu():
    from tests.helpers.ranks import run_ranks

    out = run_ranks(_measure_tiny, nprocs=1, timeout_s=110)[0]
    assert 4 * (4 + 2) <= out["tokens"] <= 4 * (8 + 6)  # real tokens only: prompts 4-8, responses 2-6
    assert out["tokens_per_s"] == pytest.approx(out["tokens"] / out["update_s"])
    assert out["mfu"] == pytest.approx(out["model_tflop"] / out["update_s"] / out["matmul_peak_tflops"])
    assert 0 < out["mfu"]
