"""The other roles on one GPU, in the order the trainer calls them: the reference policy, a log-prob pass followed by
an update, the critic, a LoRA actor that generates with the HF rollout first, and selective checkpointing (the GPU's
``auto`` for a small model) against no checkpointing. Each scenario runs in a fresh spawned process as rank 0 of 1 on
the backend and device verl.utils.device picks (nccl and CUDA here).

Marked ``gpu``: skipped with the reason where CUDA is absent (tests/conftest.py). The scenarios are device-agnostic
and the gloo tests cover the same code on CPU (tests/workers/test_fsdp_resharding.py, test_lora_workers.py).
"""

from __future__ import annotations

import pytest
import torch

from tests.gpu.ranks import BASE_OVERRIDES, actor_worker, full_weights, hf_log_probs, join_one_rank, leave
from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import save_tiny_model_dir
from tests.trainer.config.test_key_effects import typed
from tests.workers.test_lora_workers import ARR, _batch, _train_batch
from verl.utils.device import get_device_name

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

FP32 = (f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
        f"{ARR}.ref.fsdp_config.mixed_precision.param_dtype=fp32")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny_gpu_roles"))


def _run(fn, *args) -> dict:
    return run_ranks(fn, free_port(), *args, nprocs=1, timeout_s=280)[0]


def _plain(module: torch.nn.Module) -> list[str]:
    from torch.distributed.tensor import DTensor

    return [n for n, p in module.named_parameters() if not isinstance(p, DTensor)]


def _mean(value) -> float:
    values = value if isinstance(value, (list, tuple)) else [value]
    return sum(float(v) for v in values) / len(values)


def _log_prob_then_update(rank: int, port: int, model_dir: str, results) -> None:
    join_one_rank(port)
    try:
        worker = actor_worker(model_dir, *FP32)
        data = _batch()
        out = {"hf": hf_log_probs(model_dir, data)}
        old = worker.compute_log_prob(data).batch["old_log_probs"]
        out["plain_after_log_prob"] = _plain(worker.actor_module)
        ref = worker.compute_ref_log_prob(data).batch["ref_log_prob"]
        out["ref_plain"] = _plain(worker.ref_module)
        out["old"], out["ref"] = old.clone(), ref.clone()
        out["ref_device"] = next(worker.ref_module.parameters()).device.type
        before = full_weights(worker.actor_module)
        metrics = worker.update_actor(_train_batch(worker, _batch())).meta_info["metrics"]
        after = full_weights(worker.actor_module)
        out["moved"] = max((after[n] - before[n]).abs().max().item() for n in after)
        out["grad_norm"] = _mean(metrics["actor/grad_norm"])
        out["mfu"], out["peak"] = metrics["perf/mfu/actor"], metrics["perf/matmul_peak_tflops/actor"]
        ref_again = worker.compute_ref_log_prob(data).batch["ref_log_prob"]
        out["ref_unchanged"] = (ref_again - ref).abs().max().item()
        results[rank] = out
    finally:
        leave()


def test_reference_and_log_prob_pass_then_update(model_dir):
    out = _run(_log_prob_then_update, model_dir)
    assert out["plain_after_log_prob"] == [] and out["ref_plain"] == []  # every unit resharded after the pass
    assert out["ref_device"] == get_device_name()
    assert (out["old"] - out["hf"]).abs().max().item() < 1e-4
    assert (out["ref"] - out["hf"]).abs().max().item() < 1e-4  # the frozen reference is the initial model
    assert out["moved"] > 0 and out["grad_norm"] > 0
    assert out["ref_unchanged"] == 0.0  # the update touched only the actor
    assert out["mfu"] > 0 and out["peak"] > 0


def _critic(rank: int, port: int, model_dir: str, results) -> None:
    from verl.workers import fsdp_workers

    join_one_rank(port)
    try:
        config = typed(f"{ARR}.model.path={model_dir}", f"critic.model.path={model_dir}", *BASE_OVERRIDES,
                       "algorithm.adv_estimator=gae", "critic.ppo_mini_batch_size=2", "critic.ppo_micro_batch_size_per_gpu=2",
                       "critic.optim.lr=0.01", "critic.model.fsdp_config.mixed_precision.param_dtype=bf16")
        critic = fsdp_workers.CriticWorker(config.critic)
        critic.init_model()
        data = _batch()
        values = critic.compute_values(data).batch["values"]
        out = {"plain_after_values": _plain(critic.critic_module), "values_device": values.device.type,
               "param_device": next(critic.critic_module.parameters()).device.type}
        data.batch["values"] = values
        data.batch["returns"] = torch.ones_like(values) * data.batch["response_mask"]
        losses = []
        for _ in range(4):  # fit the same returns: the value loss falls
            losses.append(_mean(critic.update_critic(data).meta_info["metrics"]["critic/vf_loss"]))
        out["losses"] = losses
        out["plain_after_update"] = _plain(critic.critic_module)
        results[rank] = out
    finally:
        leave()


def test_critic_trains_on_the_gpu(model_dir):
    out = _run(_critic, model_dir)
    assert out["plain_after_values"] == [] and out["plain_after_update"] == []
    assert out["param_device"] == get_device_name() and out["values_device"] == "cpu"  # results come back to host
    assert all(torch.isfinite(torch.tensor(out["losses"])))
    assert out["losses"][-1] < out["losses"][0]


def _lora_generate_first(rank: int, port: int, model_dir: str, mode: str, results) -> None:
    from verl.protocol import DataProto

    join_one_rank(port)
    try:
        worker = actor_worker(model_dir, *FP32, f"{ARR}.model.lora_rank=4", f"{ARR}.model.lora_alpha=8",
                              f"{ARR}.model.target_modules=all-linear", f"{ARR}.rollout.mode={mode}",
                              f"{ARR}.rollout.calculate_log_probs=true")
        probe = _batch(seed=5)
        prompt_len = probe.batch["prompts"].size(1)
        prompts = DataProto.from_dict(tensors={k: probe.batch[k][:, :prompt_len] for k in
                                               ("input_ids", "attention_mask", "position_ids")},
                                      meta_info={"do_sample": True, "eos_token_id": [2], "pad_token_id": 0})
        generated = worker.generate_sequences(prompts)  # before any forward through the root: the old crash
        module = worker.actor_module
        trainable = {n for n, p in module.named_parameters() if p.requires_grad}
        base_before = {n: p.detach().full_tensor().clone() for n, p in module.named_parameters() if n not in trainable}
        train = _train_batch(worker, _batch())
        worker.update_actor(train)
        again = worker.generate_sequences(prompts)
        mask = again.batch["response_mask"]
        actor = worker.compute_log_prob(again).batch["old_log_probs"] * mask
        base = worker.compute_ref_log_prob(again).batch["ref_log_prob"] * mask
        results[rank] = {
            "responses": tuple(generated.batch["responses"].shape),
            "all_lora": bool(trainable) and all("lora_" in n for n in trainable),
            "base_unchanged": all(torch.equal(p.detach().full_tensor(), base_before[n])
                                  for n, p in module.named_parameters() if n not in trainable),
            "engine_vs_actor": (again.batch["rollout_log_probs"] * mask - actor).abs().max().item(),
            "actor_vs_base": (actor - base).abs().max().item(),
        }
    finally:
        leave()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_lora_actor_generates_first_then_trains_its_adapter(model_dir, mode):
    out = _run(_lora_generate_first, model_dir, mode)
    assert out["responses"][0] == 4 and out["all_lora"] and out["base_unchanged"]
    assert out["engine_vs_actor"] < 1e-4  # the HF engine samples the adapted module
    assert out["actor_vs_base"] > 1e-3  # and the adapter has moved it away from the base model


def _checkpointing(rank: int, port: int, model_dir: str, results) -> None:
    join_one_rank(port)
    try:
        out = {}
        for name, keys in (("off", (f"{ARR}.model.enable_gradient_checkpointing=false",)),
                           ("selective", (f"{ARR}.model.enable_gradient_checkpointing=true",
                                          f"{ARR}.model.gradient_checkpointing_policy=selective")),
                           ("full", (f"{ARR}.model.enable_gradient_checkpointing=true",
                                     f"{ARR}.model.gradient_checkpointing_policy=full"))):
            worker = actor_worker(model_dir, *FP32, *keys)
            from verl.models.checkpoint_policy import applied_checkpointing

            applied = applied_checkpointing(worker.actor_module)
            before = full_weights(worker.actor_module)
            metrics = worker.update_actor(_train_batch(worker, _batch())).meta_info["metrics"]
            after = full_weights(worker.actor_module)
            out[name] = {"applied": applied, "grad_norm": _mean(metrics["actor/grad_norm"]),
                         "delta": {n: after[n] - before[n] for n in after}}
        results[rank] = out
    finally:
        leave()


def test_selective_and_full_checkpointing_match_no_checkpointing(model_dir):
    out = _run(_checkpointing, model_dir)
    assert [out[k]["applied"] for k in ("off", "selective", "full")] == ["off", "selective", "full"]
    for name in ("selective", "full"):
        assert out[name]["grad_norm"] == pytest.approx(out["off"]["grad_norm"], rel=1e-4)
        gap = max((out[name]["delta"][n] - out["off"]["delta"][n]).abs().max().item() for n in out["off"]["delta"])
        assert gap < 1e-5, (name, gap)
