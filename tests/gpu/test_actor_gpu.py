"""The FSDP2 actor on one GPU: bf16 mixed precision against fp32, remove padding, Ulysses with sp=1, and a
checkpoint round trip. Each scenario runs in a fresh spawned process as rank 0 of 1 on the backend and device
verl.utils.device picks (nccl and CUDA here), through the same worker methods the CPU tests call on gloo.

Marked ``gpu``: skipped with the reason where CUDA is absent (tests/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from tests.gpu.ranks import actor_worker, compute_dtypes, full_weights, hf_log_probs, join_one_rank, leave
from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import save_tiny_model_dir
from tests.workers.test_lora_workers import ARR, _batch, _train_batch
from verl.utils.device import get_device_name

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

FP32 = (f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        f"{ARR}.ref.fsdp_config.mixed_precision.param_dtype=fp32")
BF16 = (f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=bf16",
        f"{ARR}.ref.fsdp_config.mixed_precision.param_dtype=bf16")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    """A tiny Llama built from a config (hidden 32, 2 layers, vocab 128) and the tiny tokenizer, as an HF folder."""
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny_gpu_model"))


def _mean(value) -> float:
    """A metric as the worker reports it (one value per micro-batch, or one value) as one float."""
    values = value if isinstance(value, (list, tuple)) else [value]
    return sum(float(v) for v in values) / len(values)


def _run(fn, *args) -> dict:
    return run_ranks(fn, free_port(), *args, nprocs=1, timeout_s=280)[0]


def _update_once(model_dir: str, *overrides: str) -> dict:
    """Log-probs, one actor update and the updated weights, under the given precision overrides."""
    worker = actor_worker(model_dir, *overrides)
    seen = compute_dtypes(worker.actor_module)
    data = _train_batch(worker, _batch())
    out = {"log_probs": data.batch["old_log_probs"].clone(), "compute_dtype": seen["dtype"],
           "compute_device": seen["device"], "device": get_device_name()}
    before = full_weights(worker.actor_module)
    metrics = worker.update_actor(data).meta_info["metrics"]
    out["metrics"] = {k: _mean(metrics[k]) for k in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm")}
    after = full_weights(worker.actor_module)
    out["delta"] = {n: after[n] - before[n] for n in after}
    out["master_dtype"] = next(worker.actor_module.parameters()).dtype
    out["after_log_probs"] = worker.compute_log_prob(_batch(seed=5)).batch["old_log_probs"].clone()
    return out


def _bf16_vs_fp32(rank: int, port: int, model_dir: str, results) -> None:
    join_one_rank(port)
    try:
        results[rank] = {"fp32": _update_once(model_dir, *FP32), "bf16": _update_once(model_dir, *BF16)}
    finally:
        leave()


def test_bf16_actor_update_and_log_probs_track_fp32(model_dir):
    out = _run(_bf16_vs_fp32, model_dir)
    fp32, bf16 = out["fp32"], out["bf16"]
    assert bf16["device"] == get_device_name() and bf16["compute_device"] == get_device_name()
    # FSDP2 casts the fp32 master weights to bf16 for compute; fp32 runs compute in fp32
    assert bf16["compute_dtype"] == torch.bfloat16 and fp32["compute_dtype"] == torch.float32
    assert bf16["master_dtype"] == torch.float32
    # bf16 keeps ~3 significant digits: log-probs near ln(1/128) = -4.85 agree to a few hundredths
    assert (bf16["log_probs"] - fp32["log_probs"]).abs().max().item() < 2e-2  # measured 1.3e-3 (emulated bf16, CPU)
    assert bf16["metrics"]["actor/grad_norm"] == pytest.approx(fp32["metrics"]["actor/grad_norm"], rel=5e-2)
    assert bf16["metrics"]["actor/pg_loss"] == pytest.approx(fp32["metrics"]["actor/pg_loss"], rel=5e-2, abs=1e-3)
    # the same step: Adam's first update moves each weight by ~lr x sign(grad), so the deltas point the same way
    cosines = [torch.nn.functional.cosine_similarity(bf16["delta"][n].flatten(), fp32["delta"][n].flatten(), dim=0)
               for n in fp32["delta"] if fp32["delta"][n].abs().sum() > 0]
    assert cosines and min(c.item() for c in cosines) > 0.9
    assert (bf16["after_log_probs"] - fp32["after_log_probs"]).abs().max().item() < 5e-2


def _padding(rank: int, port: int, model_dir: str, results) -> None:
    join_one_rank(port)
    try:
        data = _batch()
        out = {"hf": hf_log_probs(model_dir, data)}
        mask = data.batch["response_mask"]  # past a response's end the padded path computes junk, never used
        for packed in (True, False):
            worker = actor_worker(model_dir, *FP32, f"{ARR}.model.use_remove_padding={str(packed).lower()}")
            out[packed] = worker.compute_log_prob(_batch()).batch["old_log_probs"] * mask
            out[f"loss_{packed}"] = _mean(worker.update_actor(_train_batch(worker, _batch()))
                                          .meta_info["metrics"]["actor/pg_loss"])
        results[rank] = out
    finally:
        leave()


def test_remove_padding_log_probs_equal_padded(model_dir):
    out = _run(_padding, model_dir)
    assert (out[True] - out[False]).abs().max().item() < 1e-4
    assert (out[True] - out["hf"]).abs().max().item() < 1e-4
    assert out["loss_True"] == pytest.approx(out["loss_False"], rel=1e-4, abs=1e-6)


def _ulysses_sp1(rank: int, port: int, model_dir: str, results) -> None:
    join_one_rank(port)
    try:
        worker = actor_worker(model_dir, *FP32, f"{ARR}.model.use_remove_padding=true",
                              f"{ARR}.actor.ulysses_sequence_parallel_size=1",
                              f"{ARR}.ref.ulysses_sequence_parallel_size=1")
        data = _batch()
        out = {"sp": worker._sp.sp_size, "dp": worker._sp.dp_size,
               "mini": worker.actor.config.ppo_mini_batch_size, "hf": hf_log_probs(model_dir, data)}
        train = _train_batch(worker, data)
        out["old"], out["ref"] = train.batch["old_log_probs"].clone(), train.batch["ref_log_prob"].clone()
        metrics = worker.update_actor(train).meta_info["metrics"]
        out["grad_norm"] = _mean(metrics["actor/grad_norm"])
        results[rank] = out
    finally:
        leave()


def test_ulysses_sp1_on_one_gpu(model_dir):
    out = _run(_ulysses_sp1, model_dir)
    assert (out["sp"], out["dp"]) == (1, 1)
    assert out["mini"] == 4  # 2 prompts x n=2 on the one data-parallel rank
    assert (out["old"] - out["hf"]).abs().max().item() < 1e-4
    assert (out["ref"] - out["hf"]).abs().max().item() < 1e-4
    assert out["grad_norm"] > 0 and torch.isfinite(torch.tensor(out["grad_norm"]))


def _round_trip(rank: int, port: int, model_dir: str, ckpt: str, results) -> None:
    join_one_rank(port)
    try:
        worker = actor_worker(model_dir, *BF16)
        worker.update_actor(_train_batch(worker, _batch()))
        worker.save_checkpoint(ckpt, None, 1, None)
        probe = _batch(seed=5)
        saved_log_probs = worker.compute_log_prob(probe).batch["old_log_probs"].clone()
        saved_weights = full_weights(worker.actor_module)
        saved_optim = worker.actor_optimizer.state_dict()["state"]

        fresh = actor_worker(model_dir, *BF16)
        fresh_weights = full_weights(fresh.actor_module)
        fresh.load_checkpoint(ckpt)
        loaded_weights = full_weights(fresh.actor_module)
        loaded_optim = fresh.actor_optimizer.state_dict()["state"]
        out = {"moved": max((saved_weights[n] - fresh_weights[n]).abs().max().item() for n in saved_weights),
               "weights_equal": all(torch.equal(saved_weights[n], loaded_weights[n]) for n in saved_weights),
               "optim_keys": sorted(saved_optim) == sorted(loaded_optim) and len(saved_optim) > 0,
               "lr_steps": (worker.actor_lr_scheduler.last_epoch, fresh.actor_lr_scheduler.last_epoch),
               "log_prob_diff": (fresh.compute_log_prob(probe).batch["old_log_probs"] - saved_log_probs)
               .abs().max().item()}
        out["optim_equal"] = all(
            torch.equal(saved_optim[k][s].full_tensor().to("cpu"), loaded_optim[k][s].full_tensor().to("cpu"))
            for k in saved_optim for s in ("exp_avg", "exp_avg_sq"))
        out["optim_device"] = next(iter(loaded_optim.values()))["exp_avg"].device.type
        results[rank] = out
    finally:
        leave()


def test_checkpoint_round_trip_restores_weights_and_optimizer(model_dir, tmp_path):
    out = _run(_round_trip, model_dir, str(tmp_path / "ckpt"))
    assert out["moved"] > 0  # the update changed the weights, so equality below is not the initial state
    assert out["weights_equal"] and out["optim_keys"] and out["optim_equal"]
    assert out["optim_device"] == get_device_name()  # the optimizer state was loaded onto the accelerator
    assert out["lr_steps"][0] == out["lr_steps"][1]
    assert out["log_prob_diff"] == 0.0
