"""LoRA on the RL workers, on one gloo rank with a tiny Llama: the peft actor under FSDP2 (packed forward,
gradient checkpointing), an optimizer over the adapter only, the reference as the adapter-disabled actor, exact
resume from a checkpoint, the peft adapter folder, the merged HF folder of the model merger, and the critic with a
trainable value head."""

from __future__ import annotations

import os

import pytest
import torch

from tests.helpers.tiny_model import rollout_batch, save_tiny_model_dir
from tests.trainer.config.test_key_effects import typed

ARR = "actor_rollout_ref"
PROMPTS, RESPONSES = [6, 3, 5, 2], [5, 1, 3, 4]


def _overrides(model_dir: str, *extra: str) -> list[str]:
    return [f"{ARR}.model.path={model_dir}", f"critic.model.path={model_dir}", "critic.model.tokenizer_path=null",
            "algorithm.adv_estimator=grpo", f"{ARR}.rollout.n=2", f"{ARR}.rollout.name=hf", f"{ARR}.rollout.mode=sync",
            f"{ARR}.actor.ppo_mini_batch_size=2", f"{ARR}.actor.ppo_micro_batch_size_per_gpu=2",
            f"{ARR}.actor.use_kl_loss=true", f"{ARR}.model.lora_rank=4", f"{ARR}.model.lora_alpha=8",
            f"{ARR}.model.use_remove_padding=true", f"{ARR}.model.enable_gradient_checkpointing=true",
            f"{ARR}.actor.optim.lr=0.05", f"{ARR}.actor.grad_clip=1e6", f"{ARR}.rollout.calculate_log_probs=true",
            "data.max_prompt_length=6", "data.max_response_length=5",
            # fp32 compute: log-probs are compared with the plain fp32 HF model (the default is the hardware's dtype)
            f"{ARR}.actor.fsdp_config.mixed_precision.param_dtype=fp32",
            f"{ARR}.ref.fsdp_config.mixed_precision.param_dtype=fp32", *extra]


def _batch(seed: int = 0):
    data = rollout_batch(PROMPTS, RESPONSES, seed=seed)
    data.meta_info = {"temperature": 1.0}
    return data


def _base_log_probs(model_dir: str, data) -> torch.Tensor:
    """The base model's log-probs of the responses, from a plain padded forward (no peft, no packing)."""
    from transformers import AutoModelForCausalLM

    return _hf_log_probs(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), data)


def _hf_log_probs(model, data) -> torch.Tensor:
    b = data.batch
    with torch.no_grad():
        logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"],
                       position_ids=b["position_ids"]).logits
    logits = logits[:, b["prompts"].size(1) - 1 : -1]
    picked = torch.log_softmax(logits.float(), -1).gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)
    return picked * b["response_mask"]


def _train_batch(worker, data):
    old = worker.compute_log_prob(data).batch["old_log_probs"]
    ref = worker.compute_ref_log_prob(data).batch["ref_log_prob"]
    data.batch["old_log_probs"] = old
    data.batch["ref_log_prob"] = ref
    gen = torch.Generator().manual_seed(3)
    data.batch["advantages"] = torch.randn(old.shape, generator=gen) * data.batch["response_mask"]
    return data


def _lora_actor(rank: int, port: int, model_dir: str, ckpt: str, results) -> None:
    import torch.distributed as dist

    from verl.workers import fsdp_workers

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    fsdp_workers.measure_matmul_peak = lambda device, dtype: 1e12  # the perf probe is not what is tested here
    try:
        config = typed(*_overrides(model_dir))
        worker = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout_ref")
        worker.init_model()
        module = worker.actor_module
        out: dict = {"has_ref_module": hasattr(worker, "ref_module")}
        trainable = {n for n, p in module.named_parameters() if p.requires_grad}
        optimized = {id(p) for g in worker.actor_optimizer.param_groups for p in g["params"]}
        out["trainable_all_lora"] = bool(trainable) and all(".lora_A." in n or ".lora_B." in n for n in trainable)
        out["optimizer_is_trainable"] = optimized == {id(p) for n, p in module.named_parameters() if n in trainable}
        out["n_optimized"], out["n_params"] = len(optimized), len(list(module.parameters()))
        base_before = {n: p.detach().full_tensor().clone() for n, p in module.named_parameters() if n not in trainable}

        data = _train_batch(worker, _batch())
        out["ref_vs_base_before"] = (data.batch["ref_log_prob"] - _base_log_probs(model_dir, data)).abs().max().item()
        out["old_vs_ref_before"] = (data.batch["old_log_probs"] - data.batch["ref_log_prob"]).abs().max().item()
        metrics = worker.update_actor(data).meta_info["metrics"]
        out["finite_loss"] = all(bool(torch.isfinite(torch.as_tensor(v, dtype=torch.float64)).all())
                                 for k, v in metrics.items() if "loss" in k)
        out["adam_state_params"] = len(worker.actor_optimizer.state)
        out["base_unchanged"] = all(torch.equal(p.detach().full_tensor(), base_before[n])
                                    for n, p in module.named_parameters() if n not in trainable)
        probe = _batch(seed=5)
        after = worker.compute_log_prob(probe).batch["old_log_probs"]
        ref_after = worker.compute_ref_log_prob(probe).batch["ref_log_prob"]
        out["ref_vs_base_after"] = (ref_after - _base_log_probs(model_dir, probe)).abs().max().item()
        out["actor_moved"] = (after - ref_after).abs().max().item()
        # the HF rollout samples the peft module itself: its log-probs are the adapted actor's, not the base's
        from verl.protocol import DataProto

        prompt_len = probe.batch["prompts"].size(1)
        prompts = DataProto.from_dict(tensors={k: probe.batch[k][:, :prompt_len] for k in
                                               ("input_ids", "attention_mask", "position_ids")},
                                      meta_info={"do_sample": True})
        generated = worker.generate_sequences(prompts)
        mask = generated.batch["response_mask"]
        sampled = generated.batch["rollout_log_probs"] * mask
        out["hf_rollout_vs_actor"] = (sampled - worker.compute_log_prob(generated).batch["old_log_probs"] * mask
                                      ).abs().max().item()
        out["hf_rollout_vs_ref"] = (sampled - worker.compute_ref_log_prob(generated).batch["ref_log_prob"] * mask
                                    ).abs().max().item()

        worker.save_checkpoint(ckpt, None, 1, None)
        resumed = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout_ref")
        resumed.init_model()
        resumed.load_checkpoint(ckpt)
        out["resume_diff"] = (resumed.compute_log_prob(probe).batch["old_log_probs"] - after).abs().max().item()
        saved_state = worker.actor_optimizer.state_dict()["state"]
        loaded_state = resumed.actor_optimizer.state_dict()["state"]
        out["resume_optimizer_equal"] = all(
            torch.equal(saved_state[k]["exp_avg"].full_tensor(), loaded_state[k]["exp_avg"].full_tensor())
            for k in saved_state)

        adapter_dir = os.path.join(ckpt, "lora_adapter")
        started = typed(*_overrides(model_dir, f"{ARR}.model.lora_adapter_path={adapter_dir}"))
        from_adapter = fsdp_workers.ActorRolloutRefWorker(started.actor_rollout_ref, "actor_rollout_ref")
        from_adapter.init_model()
        out["adapter_start_diff"] = (from_adapter.compute_log_prob(probe).batch["old_log_probs"] - after).abs().max().item()
        torch.save({"probe": probe, "after": after}, os.path.join(ckpt, "probe.pt"))
        results["actor"] = out
    finally:
        dist.destroy_process_group()


def _lora_critic(rank: int, port: int, model_dir: str, results) -> None:
    import torch.distributed as dist

    from verl.workers import fsdp_workers

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    fsdp_workers.measure_matmul_peak = lambda device, dtype: 1e12
    try:
        config = typed(*_overrides(model_dir, "algorithm.adv_estimator=gae", "critic.model.lora_rank=4",
                                   "critic.model.lora_alpha=8", "critic.ppo_mini_batch_size=2",
                                   "critic.ppo_micro_batch_size_per_gpu=2", "critic.optim.lr=0.05",
                                   "critic.model.use_remove_padding=true",
                                   # bf16 compute over fp32 master weights: FSDP2's mixed precision on the peft module
                                   "critic.model.fsdp_config.mixed_precision.param_dtype=bf16"))
        critic = fsdp_workers.CriticWorker(config.critic)
        critic.init_model()
        module = critic.critic_module
        trainable = [n for n, p in module.named_parameters() if p.requires_grad]
        frozen = {n: p.detach().full_tensor().clone() for n, p in module.named_parameters() if not p.requires_grad}
        before = {n: p.detach().full_tensor().clone() for n, p in module.named_parameters() if p.requires_grad}
        data = _batch()
        values = critic.compute_values(data).batch["values"]
        data.batch["values"] = values
        data.batch["returns"] = torch.ones_like(values) * data.batch["response_mask"]
        critic.update_critic(data)
        moved = {n for n, p in module.named_parameters() if p.requires_grad
                 and not torch.equal(p.detach().full_tensor(), before[n])}
        results["critic"] = {
            "head_trainable": any("score.modules_to_save" in n for n in trainable),
            "others_lora": all("lora_" in n or "score.modules_to_save" in n for n in trainable),
            "head_moved": any("score.modules_to_save" in n for n in moved),
            "lora_moved": any("lora_B" in n for n in moved),
            "frozen_unchanged": all(torch.equal(p.detach().full_tensor(), frozen[n])
                                    for n, p in module.named_parameters() if not p.requires_grad),
            "n_optimized": sum(len(g["params"]) for g in critic.critic_optimizer.param_groups),
            "n_trainable": len(trainable),
        }
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def lora_actor(model_dir, tmp_path_factory) -> tuple[dict, str]:
    from tests.helpers.ranks import free_port, run_ranks

    ckpt = str(tmp_path_factory.mktemp("lora_ckpt") / "actor")
    results = run_ranks(_lora_actor, free_port(), model_dir, ckpt, nprocs=1, timeout_s=220)
    return results["actor"], ckpt


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    """A tiny Llama (tied embeddings) and the tiny tokenizer saved as a HF folder."""
    return save_tiny_model_dir(tmp_path_factory.mktemp("tiny_lora_model"))


@pytest.mark.timeout(240)
def test_lora_actor_trains_only_the_adapter_and_its_reference_is_the_base_model(lora_actor):
    out, _ = lora_actor
    assert out["has_ref_module"] is False  # no second copy of the model
    assert out["trainable_all_lora"] and out["optimizer_is_trainable"]
    assert out["n_optimized"] == 2 * 7 * 2 < out["n_params"]  # A and B of 7 linears in 2 layers
    assert out["adam_state_params"] == out["n_optimized"]  # Adam's moments for the adapter only
    assert out["ref_vs_base_before"] < 1e-4 and out["old_vs_ref_before"] < 1e-4  # B starts at zero
    assert out["finite_loss"] and out["base_unchanged"]
    assert out["actor_moved"] > 1e-3  # the adapter learned something ...
    assert out["ref_vs_base_after"] < 1e-4  # ... and disabling it still gives the base model
    assert out["hf_rollout_vs_actor"] < 1e-4 < 1e-2 < out["hf_rollout_vs_ref"]  # HF generate runs the adapter


@pytest.mark.timeout(240)
def test_lora_checkpoint_resumes_exactly_and_its_adapter_starts_a_run(lora_actor):
    out, ckpt = lora_actor
    assert out["resume_diff"] == 0.0 and out["resume_optimizer_equal"]
    assert out["adapter_start_diff"] < 1e-5
    from verl.models.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS

    assert sorted(os.listdir(os.path.join(ckpt, "lora_adapter"))) == sorted([ADAPTER_CONFIG, ADAPTER_WEIGHTS])


@pytest.mark.timeout(240)
def test_model_merger_writes_a_merged_hf_folder_with_the_actors_log_probs(lora_actor, tmp_path):
    from transformers import AutoModelForCausalLM

    from verl.model_merger.__main__ import main

    _, ckpt = lora_actor
    target = main(["merge", "--backend", "fsdp", "--local_dir", ckpt, "--target_dir", str(tmp_path / "merged")])
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32)
    assert not any("lora" in n for n in model.state_dict())
    saved = torch.load(os.path.join(ckpt, "probe.pt"), weights_only=False)
    assert (_hf_log_probs(model, saved["probe"]) - saved["after"]).abs().max().item() < 1e-4


@pytest.mark.timeout(240)
def test_lora_critic_trains_adapter_and_value_head_only(model_dir):
    from tests.helpers.ranks import free_port, run_ranks

    out = run_ranks(_lora_critic, free_port(), model_dir, nprocs=1, timeout_s=220)["critic"]
    assert out["head_trainable"] and out["others_lora"]
    assert out["n_optimized"] == out["n_trainable"]
    assert out["head_moved"] and out["lora_moved"] and out["frozen_unchanged"]
