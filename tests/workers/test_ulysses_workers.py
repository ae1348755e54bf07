"""Ulysses in the workers, 2 gloo ranks forming one SP group (dp = 1): each rank is handed its own chunk of the
batch (as Dispatch.DP_COMPUTE_PROTO does), the group computes on both chunks together, and each rank answers with
its own rows: the policy's and the reference's log-probs equal the plain HF model's; the update and the critic run
with data-parallel size world / sp and the group's ranks report the same metrics."""

from __future__ import annotations

import os

import pytest
import torch

from tests.helpers.tiny_model import save_tiny_model_dir
from tests.workers.test_lora_workers import ARR, _base_log_probs, _batch, _train_batch

WORLD = 2


def _overrides(model_dir: str) -> list[str]:
    return [f"{ARR}.model.path={model_dir}", f"critic.model.path={model_dir}", "critic.model.tokenizer_path=null",
            "algorithm.adv_estimator=gae", f"{ARR}.rollout.n=2", f"{ARR}.rollout.name=hf", f"{ARR}.rollout.mode=sync",
            "trainer.n_gpus_per_node=2", f"{ARR}.actor.ulysses_sequence_parallel_size=2",
            "critic.ulysses_sequence_parallel_size=2",
            f"{ARR}.actor.ppo_mini_batch_size=2", f"{ARR}.actor.ppo_micro_batch_size_per_gpu=2",
            "critic.ppo_mini_batch_size=2", "critic.ppo_micro_batch_size_per_gpu=2",
            "critic.forward_micro_batch_size_per_gpu=2", f"{ARR}.actor.use_kl_loss=true",
            f"{ARR}.model.use_remove_padding=true", "critic.model.use_remove_padding=true",
            f"{ARR}.actor.grad_clip=1e6", "data.max_prompt_length=6", "data.max_response_length=5",
            f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
            f"{ARR}.ref.fsdp_config.mixed_precision.param_dtype=fp32",
            "critic.model.fsdp_config.mixed_precision.param_dtype=fp32"]


def _ranks(rank: int, port: int, model_dir: str, results) -> None:
    import torch.distributed as dist

    from tests.trainer.config.test_key_effects import typed
    from verl.workers import fsdp_workers

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    fsdp_workers.measure_matmul_peak = lambda device, dtype: 1e12  # the perf probe is not what is tested here
    try:
        config = typed(*_overrides(model_dir))
        data = _batch()
        chunk = data[rank * 2:(rank + 1) * 2]
        worker = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout_ref")
        worker.init_model()
        expected = _base_log_probs(model_dir, chunk)
        out = {"dp": worker._sp.dp_size, "mini": worker.actor.config.ppo_mini_batch_size}
        old = worker.compute_log_prob(chunk).batch["old_log_probs"]
        ref = worker.compute_ref_log_prob(chunk).batch["ref_log_prob"]
        out["old"] = (old - expected).abs().max().item()
        out["ref"] = (ref - expected).abs().max().item()
        metrics = worker.update_actor(_train_batch(worker, chunk)).meta_info["metrics"]
        out["actor"] = {k: metrics[k] for k in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm")}
        critic = fsdp_workers.CriticWorker(config.critic)
        critic.init_model()
        values = critic.compute_values(chunk).batch["values"]
        out["values_shape"] = tuple(values.shape)
        chunk.batch["values"] = values
        chunk.batch["returns"] = torch.ones_like(values)
        cmetrics = critic.update_critic(chunk).meta_info["metrics"]
        out["critic"] = {k: cmetrics[k] for k in ("critic/vf_loss", "critic/grad_norm")}
        results[rank] = out
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(200)
def test_workers_with_sp2_answer_their_own_rows(tmp_path):
    from tests.helpers.ranks import free_port, run_ranks

    save_tiny_model_dir(tmp_path)
    results = run_ranks(_ranks, free_port(), str(tmp_path), nprocs=WORLD, timeout_s=190)
    for rank in range(WORLD):
        out = results[rank]
        assert out["dp"] == 1 and out["mini"] == 4  # 2 prompts x n=2 per step, on one data-parallel group
        assert out["old"] < 1e-5 and out["ref"] < 1e-5, out
        assert out["values_shape"] == (2, 5)
    for key in ("actor", "critic"):  # one SP group, one update: both ranks saw the same loss
        for name, value in results[0][key].items():
            assert results[1][key][name] == pytest.approx(value, rel=1e-6), name
