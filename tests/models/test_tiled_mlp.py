"""``model.tiled_mlp`` (actor_rollout_ref.model / critic.model): the dense MLPs computed over num_shards slices of the
tokens (verl.models.tiled_mlp) give the untiled model's outputs and gradients, and keep less for backward."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl.models.loader import load_causal_lm
from verl.models.tiled_mlp import apply_tiled_mlp, tiled_mlp_modules
from verl.workers.config import FSDPCriticModelCfg, HFModelConfig
from verl.workers.config.model import TiledMlpConfig


def _tiny_qwen2(seed: int = 0) -> Qwen2ForCausalLM:
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).float()


def _loss_and_grads(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad()
    logits = model(input_ids=ids).logits
    (logits.float().pow(2).mean()).backward()
    return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("num_shards", [2, 3, 4, 50])  # 3: uneven slices of 10 tokens; 50: more than tokens
def test_tiled_outputs_and_gradients_equal_the_untiled_models(num_shards):
    plain = _tiny_qwen2()
    tiled = copy.deepcopy(plain)
    assert apply_tiled_mlp(tiled, num_shards) == 2  # one MLP per decoder layer
    ids = torch.randint(0, 64, (2, 10))
    logits, grads = _loss_and_grads(plain, ids)
    t_logits, t_grads = _loss_and_grads(tiled, ids)
    torch.testing.assert_close(t_logits, logits, rtol=1e-5, atol=1e-6)
    assert grads.keys() == t_grads.keys()
    for name in grads:
        torch.testing.assert_close(t_grads[name], grads[name], rtol=1e-4, atol=1e-6, msg=name)
    with torch.no_grad():  # the log-prob / reference passes
        torch.testing.assert_close(tiled(input_ids=ids).logits, logits, rtol=1e-5, atol=1e-6)


def test_tiled_mlp_under_gradient_checkpointing_gives_the_same_gradients():
    from verl.models.checkpoint_policy import apply_gradient_checkpointing

    plain = _tiny_qwen2()
    tiled = copy.deepcopy(plain)
    apply_tiled_mlp(tiled, 3)
    for model in (plain, tiled):  # the layers recomputed in backward, the tiled MLP inside them (the default)
        model.config.use_cache = False
        apply_gradient_checkpointing(model, "auto")
        model.train()
    ids = torch.randint(0, 64, (2, 10))
    logits, grads = _loss_and_grads(plain, ids)
    t_logits, t_grads = _loss_and_grads(tiled, ids)
    torch.testing.assert_close(t_logits, logits, rtol=1e-5, atol=1e-6)
    for name in grads:
        torch.testing.assert_close(t_grads[name], grads[name], rtol=1e-4, atol=1e-6, msg=name)


def _saved_numel(mlp: torch.nn.Module, x: torch.Tensor) -> int:
    """Elements autograd keeps for backward in one MLP call, parameters excluded."""
    params = {p.data_ptr() for p in mlp.parameters()}
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        if t.data_ptr() not in params:
            total += t.numel()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mlp(x)
    return total


def test_tiled_mlp_keeps_only_its_input_for_backward():
    model = _tiny_qwen2()
    x = torch.randn(1, 40, 32, requires_grad=True)
    untiled = _saved_numel(model.model.layers[0].mlp, x)
    apply_tiled_mlp(model, 4)
    tiled = _saved_numel(model.model.layers[0].mlp, x)
    assert tiled == x.numel()  # the input only: the slices are recomputed in backward
    assert untiled >= 3 * 40 * 96  # gate, up and their product over the intermediate size


def test_the_model_sections_tiled_mlp_reaches_the_loaded_actor_and_critic(tmp_path):
    _tiny_qwen2().save_pretrained(tmp_path)
    ids = torch.randint(0, 64, (1, 12))
    off, _ = load_causal_lm(HFModelConfig(path=str(tmp_path)), "actor_rollout_ref.model")
    on, _ = load_causal_lm(HFModelConfig(path=str(tmp_path), tiled_mlp=TiledMlpConfig(enabled=True, num_shards=3)),
                           "actor_rollout_ref.model")
    assert [m._verl_tiled_mlp_shards for m in tiled_mlp_modules(on)] == [3, 3]
    assert not any(hasattr(m, "_verl_tiled_mlp_shards") for m in tiled_mlp_modules(off))
    logits, grads = _loss_and_grads(off, ids)
    t_logits, t_grads = _loss_and_grads(on, ids)
    torch.testing.assert_close(t_logits, logits, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(t_grads["model.layers.1.mlp.up_proj.weight"], grads["model.layers.1.mlp.up_proj.weight"],
                               rtol=1e-4, atol=1e-6)
    critic_cfg = FSDPCriticModelCfg(path=str(tmp_path), tiled_mlp=TiledMlpConfig(enabled=True, num_shards=2))
    critic, _ = load_causal_lm(critic_cfg, "critic.model", value_head=True)
    assert [m._verl_tiled_mlp_shards for m in tiled_mlp_modules(critic)] == [2, 2]


def test_a_model_without_a_dense_mlp_is_refused():
    with pytest.raises(ValueError, match=r"critic.model.tiled_mlp.enabled=true, but Sequential has no dense MLP"):
        apply_tiled_mlp(torch.nn.Sequential(torch.nn.Linear(4, 4)), 2, "critic.model.tiled_mlp")


def _fsdp_worker(rank: int, port: int, folder: str, results) -> None:
    import torch.distributed as dist

    from tests.workers.actor.test_dp_actor import training_batch
    from tests.workers.actor.test_memory_knobs import _step
    from verl.models import tiled_mlp
    from verl.trainer.config import FSDPEngineConfig
    from verl.workers.config import MixedPrecisionConfig
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh

    calls = []
    apply = tiled_mlp.TiledMLPFunction.apply
    tiled_mlp.TiledMLPFunction.apply = lambda *a: calls.append(1) or apply(*a)  # count the tiled training forwards
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        fsdp_cfg = FSDPEngineConfig(mixed_precision=MixedPrecisionConfig(param_dtype="fp32"))
        out, data = [], None
        for tiled in (False, True):
            cfg = HFModelConfig(path=folder, tiled_mlp=TiledMlpConfig(enabled=tiled, num_shards=3))
            model, _ = load_causal_lm(cfg, "actor_rollout_ref.model")  # gradient checkpointing on: the default
            data = data if data is not None else training_batch(model)
            out.append(_step(apply_fsdp2(model, fsdp_cfg, create_device_mesh(2)), data))
        (lp, grad), (t_lp, t_grad) = out
        results[rank] = (len(calls) > 0, torch.allclose(t_lp, lp, rtol=1e-5, atol=1e-6),
                         [k for k in grad if not torch.allclose(t_grad[k], grad[k], rtol=1e-4, atol=1e-6)])
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
def test_fsdp2_sharded_training_with_tiled_mlp_matches_the_untiled(tmp_path):
    from tests.helpers.ranks import free_port, run_ranks
    from tests.helpers.tiny_model import tiny_llama

    tiny_llama(num_hidden_layers=2).save_pretrained(tmp_path)  # the vocabulary the test batches use
    out = run_ranks(_fsdp_worker, free_port(), str(tmp_path), nprocs=2, timeout_s=280)
    # the tiled MLPs ran; the same log-probs, and the same update on every parameter
    assert out[0] == out[1] == (True, True, [])


def test_a_model_whose_experts_are_fused_is_refused_before_ray(tmp_path):
    """Qwen3-MoE's experts are one fused module in transformers: nothing to tile. The pre-Ray check builds the
    folder's model class on the meta device and names the key; a dense model's folder passes."""
    from tests.helpers.tiny_moe import tiny_qwen3_moe_config
    from tests.trainer.config.test_key_effects import problems, typed
    from verl.trainer.config.tiled_mlp_checks import check_tiled_mlp

    moe, dense = tmp_path / "moe", tmp_path / "dense"
    tiny_qwen3_moe_config().save_pretrained(moe)
    _tiny_qwen2().config.save_pretrained(dense)
    found = problems(f"actor_rollout_ref.model.path={moe}", "actor_rollout_ref.model.tiled_mlp.enabled=true")
    assert [p for p in found if "tiled_mlp" in p] == [
        f"actor_rollout_ref.model.tiled_mlp.enabled=true, but the model at actor_rollout_ref.model.path={moe} has no "
        "dense MLP (gate_proj / up_proj / down_proj modules) to tile: its experts are one fused module; set "
        "actor_rollout_ref.model.tiled_mlp.enabled=false."]
    dense_cfg = typed(f"actor_rollout_ref.model.path={dense}", "actor_rollout_ref.model.tiled_mlp.enabled=true",
                      "critic.model.tiled_mlp.enabled=true", "algorithm.adv_estimator=gae")
    assert check_tiled_mlp(dense_cfg) == []
