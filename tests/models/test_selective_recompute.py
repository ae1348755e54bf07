"""Selective checkpointing by autograd functions: the SwiGLU product and the norm's normalised input recomputed in the
backward. Same forward and gradients as without it (finite differences, HF's modules, FSDP2 in bf16), the bytes kept
for the backward fall by the hand-computed amount, and models it does not cover fall back to torch's mode."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from tests.helpers.tiny_model import tiny_llama
from tests.workers.actor.test_dp_actor import training_batch
from tests.workers.actor.test_memory_knobs import _step
from verl.models.checkpoint_policy import apply_gradient_checkpointing
from verl.models.fused_norm_rope import _RMSNorm, fuse_norm_and_rope
from verl.models.selective_recompute import (
    _recompute_mlp_forward,
    _SwiGLUDown,
    disable_selective_recompute,
    enable_selective_recompute,
    swiglu_down,
)


def _fused_llama(**overrides) -> torch.nn.Module:
    model = tiny_llama(**overrides)
    fuse_norm_and_rope(model)
    return model


@pytest.mark.parametrize("bias", [False, True])
def test_swiglu_down_gradcheck(bias):
    torch.manual_seed(0)
    inputs = [torch.randn(3, 5, 6, dtype=torch.float64, requires_grad=True),  # gate
              torch.randn(3, 5, 6, dtype=torch.float64, requires_grad=True),  # up
              torch.randn(4, 6, dtype=torch.float64, requires_grad=True)]  # down_proj weight
    if bias:
        inputs.append(torch.randn(4, dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(lambda g, u, w, *b: _SwiGLUDown.apply(g, u, w, b[0] if b else None), inputs)


def test_swiglu_down_hand_computed():
    # gate 0 -> silu 0 (slope 1/2); gate 2 -> silu 2*sigmoid(2); one output row of weight [1, 1]
    gate = torch.tensor([[0.0, 2.0]], requires_grad=True)
    up = torch.tensor([[3.0, -1.0]], requires_grad=True)
    down = torch.nn.Linear(2, 1, bias=False)
    down.weight.data = torch.tensor([[1.0, 1.0]])
    out = swiglu_down(gate, up, down)
    s2 = torch.sigmoid(torch.tensor(2.0))
    assert torch.allclose(out, torch.tensor([[-2.0 * s2]]))
    out.sum().backward()
    dsilu2 = s2 * (1 + 2.0 * (1 - s2))
    assert torch.allclose(gate.grad, torch.tensor([[0.5 * 3.0, dsilu2 * -1.0]]))
    assert torch.allclose(up.grad, torch.tensor([[0.0, 2.0 * s2]]))
    assert torch.allclose(down.weight.grad, torch.tensor([[0.0, -2.0 * s2]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_mlp_and_norm_give_hf_s_forward_and_gradients_bitwise(dtype):
    model = _fused_llama(mlp_bias=True).to(dtype)
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    results = []
    for recompute in (False, True):
        module = copy.deepcopy(model)
        if recompute:
            assert enable_selective_recompute(module)
        logits = module(input_ids=ids).logits
        logits.float().logsumexp(-1).mean().backward()
        results.append((logits.detach(), {n: p.grad for n, p in module.named_parameters()}))
    (ref_logits, ref_grads), (logits, grads) = results
    assert torch.equal(logits, ref_logits)
    for name, grad in grads.items():
        assert torch.equal(grad, ref_grads[name]), name


def test_the_recompute_norm_matches_the_fused_norm_bitwise():
    torch.manual_seed(0)
    x = torch.randn(4, 7, 16, dtype=torch.bfloat16)
    weight = torch.rand(16, dtype=torch.bfloat16) + 0.5
    outs = []
    for keep_input in (False, True):
        xi, wi = x.clone().requires_grad_(), weight.clone().requires_grad_()
        out = _RMSNorm.apply(xi, wi, 1e-6, keep_input)
        (out.float() * torch.linspace(-1, 1, 16)).sum().backward()
        outs.append((out, xi.grad, wi.grad))
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


def _saved_bytes(model: torch.nn.Module, ids: torch.Tensor) -> int:
    """Bytes of the distinct activation storages autograd keeps for the backward of one forward (weights excluded)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=ids).logits.float().logsumexp(-1).mean()
    return sum(seen.values())


def test_the_bytes_kept_fall_by_the_hand_computed_amount():
    model = _fused_llama().to(torch.bfloat16)
    cfg = model.config
    ids = torch.randint(0, cfg.vocab_size, (2, 9))
    off = _saved_bytes(model, ids)
    assert enable_selective_recompute(model)
    selective = _saved_bytes(model, ids)
    tokens, layers, hidden, inter = ids.numel(), cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size
    # per token: each norm (2 per layer and the final one) keeps its bf16 input, not the float32 x̂ (4 -> 2 bytes per
    # hidden unit); each MLP drops silu(gate) and the product (2 bf16 intermediate-size tensors)
    expected = tokens * ((2 * layers + 1) * hidden * (4 - 2) + layers * 2 * inter * 2)
    assert off - selective == expected, (off, selective, expected)


def test_enable_and_disable_round_trip_and_the_forward_without_grad():
    model = _fused_llama()
    assert enable_selective_recompute(model) and enable_selective_recompute(model)  # idempotent
    mlp = model.model.layers[0].mlp
    assert mlp.forward.__func__ is _recompute_mlp_forward
    x = torch.randn(2, 3, model.config.hidden_size)
    with torch.no_grad():  # the module's own forward: nothing to keep
        assert torch.equal(mlp(x), type(mlp).forward(mlp, x))
    disable_selective_recompute(model)
    assert "forward" not in vars(mlp)
    assert not enable_selective_recompute(tiny_llama())  # HF's norms keep their intermediates: torch's mode instead


def test_a_lora_adapter_on_down_proj_runs_its_own_forward():
    from peft import LoraConfig, get_peft_model

    model = _fused_llama()
    enable_selective_recompute(model)  # as the loader does, before the adapter is added
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["down_proj", "gate_proj"],
                                                  init_lora_weights=False))
    reference = copy.deepcopy(peft_model)
    disable_selective_recompute(reference)
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    grads = []
    for m in (reference, peft_model):
        m(input_ids=ids).logits.logsumexp(-1).mean().backward()
        grads.append({n: p.grad for n, p in m.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys() and any("lora" in k for k in grads[0])
    for name in grads[0]:
        assert torch.allclose(grads[0][name], grads[1][name], atol=1e-7), name


def test_packed_and_padded_actor_steps_match_no_checkpointing():
    model = _fused_llama()
    data = training_batch(model)
    for rmpad in (False, True):
        _, reference = _step(copy.deepcopy(model), data, use_remove_padding=rmpad)
        module = copy.deepcopy(model)
        assert apply_gradient_checkpointing(module, "selective") == "selective"
        assert not module.is_gradient_checkpointing  # no torch checkpoint wrapper around the layers
        _, grad = _step(module, data, use_remove_padding=rmpad)
        for name in grad:
            assert torch.equal(grad[name], reference[name]), (rmpad, name)


def _fsdp_worker(rank: int, port: int, results) -> None:
    import torch.distributed as dist

    from verl.trainer.config import FSDPEngineConfig, MixedPrecisionConfig
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        plain = _fused_llama()
        data = training_batch(plain)
        fsdp_cfg = FSDPEngineConfig(mixed_precision=MixedPrecisionConfig(param_dtype="bf16", reduce_dtype="fp32"))
        grads = {}
        for policy in (None, "selective"):
            module = copy.deepcopy(plain)
            assert apply_gradient_checkpointing(module, policy) == (policy or "off")
            module = apply_fsdp2(module, fsdp_cfg, create_device_mesh(1))
            grads[policy] = _step(module, data, use_remove_padding=True)[1]
        results[0] = max((grads["selective"][k] - grads[None][k]).abs().max().item() for k in grads[None])
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_fsdp2_bf16_gradients_unchanged():
    from tests.helpers.ranks import free_port, run_ranks

    assert run_ranks(_fsdp_worker, free_port(), nprocs=1, timeout_s=100)[0] == 0.0


def test_the_swiglu_backward_matches_autograd_in_bf16():
    torch.manual_seed(1)
    gate, up = torch.randn(2, 2, 5, 8, dtype=torch.bfloat16).unbind(0)
    down = torch.nn.Linear(8, 3, bias=False).bfloat16()
    grads = []
    for fn in (lambda g, u: down(F.silu(g) * u), lambda g, u: swiglu_down(g, u, down)):
        g, u = gate.clone().requires_grad_(), up.clone().requires_grad_()
        down.weight.grad = None
        fn(g, u).float().square().sum().backward()
        grads.append((g.grad, u.grad, down.weight.grad))
    for a, b in zip(*grads, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("targets, applied", [(["q_proj", "v_proj"], "selective"),
                                              ("all-linear", "selective-torch")])
def test_lora_keeps_selective_checkpointing(targets, applied):
    from verl.models.checkpoint_policy import applied_checkpointing
    from verl.models.lora import add_lora

    model = _fused_llama()
    reference = add_lora(copy.deepcopy(model), rank=4, alpha=8, target_modules=targets)
    assert apply_gradient_checkpointing(model, "selective") == "selective"
    wrapped = add_lora(model, rank=4, alpha=8, target_modules=targets)
    wrapped.load_state_dict(reference.state_dict())  # the same adapter weights
    assert applied_checkpointing(wrapped.get_base_model()) == applied
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    grads = []
    for m in (reference, wrapped):
        m.train()
        m(input_ids=ids).logits.logsumexp(-1).mean().backward()
        grads.append({n: p.grad for n, p in m.named_parameters() if p.requires_grad and p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any("lora_A" in k for k in grads[0])
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-5, atol=1e-7, msg=name)
