"""actor_rollout_ref.nccl_timeout: the actor/rollout/ref worker's process group is created with that timeout (what
torch's collectives wait before they fail), on one gloo rank with a tiny Llama."""

from __future__ import annotations

import datetime
import os

import pytest

from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import save_tiny_model_dir
from tests.trainer.config.test_key_effects import typed
from tests.workers.test_lora_workers import ARR


def _rank(rank: int, port: int, model_dir: str, results) -> None:
    import torch
    import torch.distributed as dist

    from verl.workers import fsdp_workers

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    fsdp_workers.measure_matmul_peak = lambda device, dtype: 1e12
    seen = {}
    real = dist.init_process_group

    def recording(*args, **kwargs):
        seen["timeout"] = kwargs.get("timeout")
        return real(*args, **kwargs)

    dist.init_process_group = recording
    try:
        config = typed(f"{ARR}.model.path={model_dir}", f"critic.model.path={model_dir}", "critic.model.tokenizer_path=null",
                       f"{ARR}.rollout.name=hf", f"{ARR}.rollout.mode=sync", f"{ARR}.actor.ppo_mini_batch_size=2",
                       f"{ARR}.nccl_timeout=123")
        worker = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout_ref")
        worker.init_model()
        results[rank] = {"timeout": seen.get("timeout"), "initialized": dist.is_initialized()}
    finally:
        dist.init_process_group = real
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_nccl_timeout_is_the_process_groups_timeout(tmp_path):
    model_dir = save_tiny_model_dir(tmp_path / "model")
    out = run_ranks(_rank, free_port(), model_dir, nprocs=1, timeout_s=280)[0]
    assert out["initialized"] and out["timeout"] == datetime.timedelta(seconds=123)
