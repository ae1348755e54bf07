"""gradient_checkpointing_policy: full and selective checkpointing (the recompute functions, or torch's mode where they
do not apply) give the gradients of no checkpointing; full runs every decoder matmul again in backward, selective
none; auto resolves by device and the driver logs the choice."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.helpers.tiny_model import tiny_llama
from tests.workers.actor.test_dp_actor import training_batch
from tests.workers.actor.test_memory_knobs import _step
from verl.models import checkpoint_policy
from verl.models.checkpoint_policy import applied_checkpointing
from verl.trainer.config import HFModelConfig
from verl.utils import device


class _CountMatmuls(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _load(folder, enable: bool, policy: str = "auto"):
    """``selective-torch``: selective with HF's norms (VERL_FUSED_NORM_ROPE=0), which the functions do not cover."""
    from verl.models.loader import load_causal_lm

    torch_mode = policy == "selective-torch"
    cfg = HFModelConfig(path=str(folder), enable_gradient_checkpointing=enable,
                      gradient_checkpointing_policy="selective" if torch_mode else policy)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VERL_FUSED_NORM_ROPE", "0" if torch_mode else "1")
        return load_causal_lm(cfg, "actor_rollout_ref.model")[0]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    tiny_llama().save_pretrained(path)
    return path


def test_full_and_selective_give_the_gradients_of_no_checkpointing(folder):
    off = _load(folder, False)
    data = training_batch(off)
    for rmpad in (False, True):  # padded sdpa and the packed per-segment attention
        _, reference = _step(copy.deepcopy(off), data, use_remove_padding=rmpad)
        for policy in ("full", "selective", "selective-torch"):
            module = _load(folder, True, policy)
            assert applied_checkpointing(module) == policy
            _, grad = _step(module, data, use_remove_padding=rmpad)
            worst = max((grad[k] - reference[k]).abs().max().item() for k in grad)
            assert worst < 1e-6, (policy, rmpad, worst)


def test_selective_recomputes_no_matmul_and_full_recomputes_every_layer_matmul(folder):
    model = _load(folder, False)
    ids = torch.randint(0, model.config.vocab_size, (2, 12))
    counts = {}
    for name, module in (("off", model), ("full", _load(folder, True, "full")),
                         ("selective", _load(folder, True, "selective")),
                         ("selective-torch", _load(folder, True, "selective-torch"))):
        module.train()
        loss = module(input_ids=ids).logits.float().logsumexp(-1).mean()
        with _CountMatmuls() as backward:
            loss.backward()
        counts[name] = backward.count
    assert counts["selective"] == counts["selective-torch"] == counts["off"]
    # each layer's forward again, up to the last tensor backward needs (torch stops recomputing there): here 6 of
    # its 9 matmuls (7 projections, 2 eager-attention bmm)
    assert counts["full"] == counts["off"] + 6 * model.config.num_hidden_layers


def test_auto_is_selective_on_cpu_and_full_on_gpu(monkeypatch):
    monkeypatch.setattr(device, "is_cuda_available", lambda: False)
    assert checkpoint_policy.resolve_checkpointing_policy("auto")[0] == "selective"
    assert "context_fn" in checkpoint_policy.checkpointing_kwargs("auto")
    monkeypatch.setattr(device, "is_cuda_available", lambda: True)
    policy, why = checkpoint_policy.resolve_checkpointing_policy("auto")  # no activation estimate: upstream's
    assert policy == "full" and why.startswith("GPU")
    assert checkpoint_policy.checkpointing_kwargs("auto") == {"use_reentrant": False}
    for explicit in ("full", "selective"):  # an explicit value wins on any device
        assert checkpoint_policy.resolve_checkpointing_policy(explicit) == (explicit, "set")
    with pytest.raises(ValueError, match="gradient_checkpointing_policy='some'"):
        checkpoint_policy.resolve_checkpointing_policy("some")


def test_the_loader_applies_the_policy(folder, monkeypatch):
    monkeypatch.setattr(device, "is_cuda_available", lambda: False)
    for policy, applied in (("auto", "selective"), ("selective", "selective"), ("full", "full"),
                            ("selective-torch", "selective-torch")):
        assert applied_checkpointing(_load(folder, True, policy)) == applied, policy
    assert applied_checkpointing(_load(folder, False, "full")) == "off"


def test_the_critic_loader_applies_its_policy(folder, monkeypatch):
    from verl.models.loader import load_causal_lm
    from verl.workers.config import FSDPCriticModelCfg

    monkeypatch.setattr(device, "is_cuda_available", lambda: False)
    for policy in ("auto", "full"):
        cfg = FSDPCriticModelCfg(path=str(folder), gradient_checkpointing_policy=policy)
        module = load_causal_lm(cfg, "critic.model", value_head=True)[0]
        assert applied_checkpointing(module) == ("selective" if policy == "auto" else "full"), policy


def test_auto_on_gpu_is_selective_when_the_kept_activations_fit_a_quarter_of_the_card(monkeypatch):
    from types import SimpleNamespace

    card = 80 * 2**30
    monkeypatch.setattr(device, "is_cuda_available", lambda: True)
    monkeypatch.setattr(device, "get_device_id", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: SimpleNamespace(total_memory=card))
    # SmolLM2-135M's shape: per layer and token 8 x 576 + 3 x 1536 = 9216 values, 2 bytes each, 30 layers
    smol = SimpleNamespace(hidden_size=576, intermediate_size=1536, num_hidden_layers=30)
    assert checkpoint_policy.selective_activation_bytes(smol, tokens=16384) == 16384 * 30 * 9216 * 2  # 8.4 GiB
    policy, why = checkpoint_policy.resolve_checkpointing_policy(
        "auto", checkpoint_policy.selective_activation_bytes(smol, tokens=16384))
    assert policy == "selective" and "20 GiB" in why
    # a 7B Llama's shape at the same budget: 16384 x 32 x (8 x 4096 + 3 x 11008) x 2 bytes = 64.5 GiB > 20 GiB
    big = SimpleNamespace(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32)
    policy, why = checkpoint_policy.resolve_checkpointing_policy(
        "auto", checkpoint_policy.selective_activation_bytes(big, tokens=16384))
    assert policy == "full" and "exceed" in why
    exactly = int(checkpoint_policy.SELECTIVE_GPU_MEMORY_SHARE * card)  # the boundary belongs to selective
    assert checkpoint_policy.resolve_checkpointing_policy("auto", exactly)[0] == "selective"
    assert checkpoint_policy.resolve_checkpointing_policy("auto", exactly + 1)[0] == "full"
    assert checkpoint_policy.resolve_checkpointing_policy("full", 1) == ("full", "set")  # explicit still wins
