"""Memory/precision knobs against the plain fp32 path: FSDP2 mixed precision (bf16 compute, fp32 master weights
and grad reduction) within a bf16 tolerance, gradient checkpointing from the model config, offload on CPU."""

from __future__ import annotations

import copy
import logging

import pytest
import torch

from tests.helpers.tiny_model import tiny_llama
from tests.workers.actor.test_dp_actor import actor_config, training_batch
from verl.trainer.config import FSDPConfig, ModelConfig
from verl.trainer.config.engine import MixedPrecisionConfig
from verl.workers.actor import DataParallelPPOActor

LR = 0.5


def _step(model, data, **cfg) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    actor = DataParallelPPOActor(actor_config(**cfg), model, torch.optim.SGD(model.parameters(), lr=LR))
    log_probs, _ = actor.compute_log_prob(data)
    start = {k: _full(v).clone() for k, v in model.state_dict().items()}
    actor.update_policy(data)
    return log_probs, {k: (start[k] - _full(v)) / LR for k, v in model.state_dict().items()}  # the gradient


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _mixed_precision_worker(rank: int, port: int, results) -> None:
    import torch.distributed as dist

    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        plain = tiny_llama()
        data = training_batch(plain)
        ref_lp, ref_grad = _step(copy.deepcopy(plain), data)
        out = {}
        for name, dtype in (("fp32", "fp32"), ("bf16", "bf16")):
            fsdp_cfg = FSDPConfig(mixed_precision=MixedPrecisionConfig(param_dtype=dtype, reduce_dtype="fp32"))
            for rmpad in (False, True):
                model = apply_fsdp2(copy.deepcopy(plain), fsdp_cfg, create_device_mesh(1))
                lp, grad = _step(model, data, use_remove_padding=rmpad)
                mask = data.batch["response_mask"].bool()
                num = torch.sqrt(sum(((grad[k] - ref_grad[k]) ** 2).sum() for k in grad))
                den = torch.sqrt(sum((ref_grad[k] ** 2).sum() for k in grad))
                out[f"{name}/rmpad={rmpad}"] = ((lp - ref_lp)[mask].abs().max().item(), (num / den).item(),
                                                {str(p.dtype) for p in model.parameters()})
        results[0] = out
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_bf16_mixed_precision_is_close_to_fp32():
    from tests.helpers.ranks import free_port, run_ranks

    results = run_ranks(_mixed_precision_worker, free_port(), nprocs=1, timeout_s=100)
    out = results[0]
    for rmpad in (False, True):
        lp_err, grad_err, dtypes = out[f"fp32/rmpad={rmpad}"]
        assert lp_err < 1e-5 and grad_err < 1e-4, (rmpad, lp_err, grad_err)  # FSDP2 fp32 == plain
        lp_err, grad_err, dtypes = out[f"bf16/rmpad={rmpad}"]
        # bf16 keeps 8 mantissa bits (relative rounding 2^-9 ~ 0.2%): log-probs near log(1/128) ~ -4.9 move by
        # ~1e-3 (measured 0.8-1.2e-3), the gradient by under 1% in norm (measured 0.55%); but they do move
        assert 1e-5 < lp_err < 0.02 and grad_err < 0.03, (rmpad, lp_err, grad_err)
        assert dtypes == {"torch.float32"}  # master weights stay fp32; only the compute copies are bf16


def test_gradient_checkpointing_from_model_config(tmp_path):
    from verl.models.loader import load_causal_lm

    tiny_llama().save_pretrained(tmp_path)
    on, _ = load_causal_lm(ModelConfig(path=str(tmp_path), enable_gradient_checkpointing=True),
                           "actor_rollout_ref.model")
    off, _ = load_causal_lm(ModelConfig(path=str(tmp_path)), "actor_rollout_ref.model")
    assert on.is_gradient_checkpointing and not off.is_gradient_checkpointing
    data = training_batch(off)
    for rmpad in (False, True):
        _, grad_on = _step(copy.deepcopy(on), data, use_remove_padding=rmpad)
        _, grad_off = _step(copy.deepcopy(off), data, use_remove_padding=rmpad)
        assert max((grad_on[k] - grad_off[k]).abs().max().item() for k in grad_on) < 1e-5


def test_offload_on_cpu_warns_and_changes_nothing(caplog, monkeypatch):
    from verl.workers import fsdp_utils

    captured = {}

    def fake_fully_shard(module, **kwargs):
        captured.update(kwargs)
        return module

    monkeypatch.setattr(fsdp_utils, "fully_shard", fake_fully_shard)
    with caplog.at_level(logging.WARNING, logger="verl.workers.fsdp_utils"):
        fsdp_utils.apply_fsdp2(tiny_llama(), FSDPConfig(param_offload=True, optimizer_offload=True), mesh=None)
    assert "no effect on CPU" in caplog.text
    assert "offload_policy" not in captured
