"""model.enable_activation_offload: the saved-tensor hooks around each decoder layer but the last give bitwise the
log-probs and gradients of the model without them, under every gradient-checkpointing policy and under FSDP2; what
they move is what the layer saves for backward, never a parameter. On a CPU nothing needs moving, so the tests ask
the hooks to move host tensors too (``offload_device_types=("cpu",)``): the same copy-and-reload path a GPU runs."""

from __future__ import annotations

import pytest
import torch

from tests.models.test_checkpoint_policy import _load
from tests.workers.actor.test_dp_actor import training_batch
from tests.workers.actor.test_memory_knobs import _step
from verl.models.activation_offload import (
    activation_offload_enabled,
    disable_activation_offload,
    enable_activation_offload,
)
from verl.workers.fsdp_utils import decoder_layers

POLICIES = ("off", "full", "selective", "selective-torch")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    from tests.helpers.tiny_model import tiny_llama

    path = tmp_path_factory.mktemp("tiny")
    tiny_llama(num_hidden_layers=3).save_pretrained(path)
    return path


def _model(folder, policy: str):
    return _load(folder, policy != "off", "full" if policy == "off" else policy)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("rmpad", [False, True])
def test_offloaded_layers_give_the_gradients_of_the_plain_model(folder, rmpad):
    data = training_batch(_model(folder, "off"))
    for policy in POLICIES:
        reference_lp, reference = _step(_model(folder, policy), data, use_remove_padding=rmpad)
        module = _model(folder, policy)
        layers = decoder_layers(module)
        offloads = enable_activation_offload(layers, offload_device_types=("cpu",))
        assert [o.layer for o in offloads] == layers[:-1]  # the last layer's activations are needed first
        log_probs, grad = _step(module, data, use_remove_padding=rmpad)
        assert torch.equal(log_probs, reference_lp), policy
        for name in grad:
            assert torch.equal(grad[name], reference[name]), (policy, name)
        for offload in offloads:
            assert offload.moved > 0 and not offload.active(), policy
            if policy in ("full", "selective-torch"):  # the checkpoint keeps the layer's inputs only
                assert offload.packed == offload.moved, policy
            else:  # every activation moves; the weights the matmuls saved stay
                assert 0 < offload.moved < offload.packed, policy


def test_without_a_device_to_move_from_the_hooks_keep_host_tensors_in_place(folder):
    module = _model(folder, "selective")
    offloads = enable_activation_offload(decoder_layers(module))  # the default: only non-CPU tensors move
    _step(module, training_batch(_model(folder, "off")))
    assert all(o.packed > 0 and o.moved == 0 for o in offloads)


def test_the_hooks_pack_only_while_training_with_grad(folder):
    module = _model(folder, "off")
    offloads = enable_activation_offload(decoder_layers(module), offload_device_types=("cpu",))
    ids = torch.randint(0, module.config.vocab_size, (2, 7))
    module.eval()
    module(input_ids=ids).logits.sum().backward()  # eval mode: a reference-style forward keeps its tensors
    module.train()
    with torch.no_grad():
        module(input_ids=ids)
    assert all(o.packed == 0 for o in offloads)
    module(input_ids=ids).logits.sum().backward()
    assert all(o.moved > 0 for o in offloads)


def test_disable_restores_the_layers(folder):
    module = _model(folder, "full")
    layers = decoder_layers(module)
    checkpoint_funcs = [layer._gradient_checkpointing_func for layer in layers]
    enable_activation_offload(layers)
    assert activation_offload_enabled(module)
    assert layers[0]._gradient_checkpointing_func is not checkpoint_funcs[0]
    enable_activation_offload(layers)  # again: replaces, does not stack
    assert layers[0]._gradient_checkpointing_func.inner is checkpoint_funcs[0]
    disable_activation_offload(layers)
    assert not activation_offload_enabled(module)
    assert [layer._gradient_checkpointing_func for layer in layers] == checkpoint_funcs
    plain = _model(folder, "off")
    enable_activation_offload(decoder_layers(plain))
    disable_activation_offload(decoder_layers(plain))
    assert not any(layer._forward_hooks or layer._forward_pre_hooks for layer in decoder_layers(plain))


def _fsdp_worker(rank: int, port: int, folder: str, results) -> None:
    import torch.distributed as dist

    from verl.trainer.config import FSDPEngineConfig
    from verl.workers.config import MixedPrecisionConfig
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        fsdp_cfg = FSDPEngineConfig(mixed_precision=MixedPrecisionConfig(param_dtype="fp32"))
        data = training_batch(_model(folder, "off"))
        out = {}
        for policy in ("off", "full"):
            ref_lp, ref_grad = _step(apply_fsdp2(_model(folder, policy), fsdp_cfg, create_device_mesh(1)), data)
            plain = _model(folder, policy)
            layers = decoder_layers(plain)
            module = apply_fsdp2(plain, fsdp_cfg, create_device_mesh(1), offload_activations=True)
            on_cpu = activation_offload_enabled(module)
            offloads = enable_activation_offload(layers, offload_device_types=("cpu",))  # move host tensors too
            lp, grad = _step(module, data)
            out[policy] = (on_cpu, torch.equal(lp, ref_lp), all(torch.equal(grad[k], ref_grad[k]) for k in grad),
                           [(o.packed, o.moved) for o in offloads])
        results[0] = out
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(240)
def test_fsdp2_units_offload_without_changing_the_gradients(folder):
    from tests.helpers.ranks import free_port, run_ranks

    out = run_ranks(_fsdp_worker, free_port(), str(folder), nprocs=1, timeout_s=220)[0]
    for policy, (enabled, same_lp, same_grad, counts) in out.items():
        assert enabled and same_lp and same_grad, policy
        assert all(moved > 0 for _, moved in counts), (policy, counts)
        if policy == "off":  # FSDP2's gathered weights are recognised as parameters and stay
            assert all(moved < packed for packed, moved in counts), counts
