"""Tiny random Qwen3-MoE models (no downloads, CPU, fp32, eager attention) for the router-replay tests."""

from __future__ import annotations

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from tests.helpers.tiny_model import EOS_ID, PAD_ID, VOCAB_SIZE

NUM_EXPERTS = 32
TOP_K = 2
LAYERS = 2


def tiny_qwen3_moe_config(**overrides) -> Qwen3MoeConfig:
    kwargs = dict(vocab_size=VOCAB_SIZE, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                  num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  num_experts=NUM_EXPERTS, num_experts_per_tok=TOP_K, norm_topk_prob=True,
                  max_position_embeddings=256, tie_word_embeddings=True, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
                  bos_token_id=1, attention_dropout=0.0)
    kwargs.update(overrides)
    config = Qwen3MoeConfig(**kwargs)
    config._attn_implementation = "eager"
    return config


def tiny_qwen3_moe(seed: int = 0, **overrides) -> Qwen3MoeForCausalLM:
    """A random tiny Qwen3-MoE causal LM (2 MoE layers, 32 experts, top-2); the same seed, the same weights."""
    torch.manual_seed(seed)
    return Qwen3MoeForCausalLM(tiny_qwen3_moe_config(**overrides)).float()


def routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [layer.mlp.gate for layer in model.model.layers]


def perturb_unused_experts(model: torch.nn.Module, record: torch.Tensor) -> int:
    """Give every expert no token of ``record`` (..., layers, k) chose, layer by layer, 4x the router row of a chosen
    one: the native top-k then changes for tokens that liked the copied expert, while the chosen experts' logits
    (so their renormalised weights) stay as recorded. Returns how many rows changed."""
    changed = 0
    with torch.no_grad():
        for layer, gate in enumerate(routers(model)):
            chosen = record[..., layer, :]
            used = sorted({int(e) for e in chosen.flatten().tolist() if e >= 0})
            counts = torch.bincount(chosen[chosen >= 0].long().flatten(), minlength=gate.weight.size(0))
            favourite = int(counts.argmax())
            for expert in range(gate.weight.size(0)):
                if expert not in used:
                    gate.weight[expert] = 4.0 * gate.weight[favourite]
                    changed += 1
    return changed


class ExpertsSpy:
    """Keeps the top_k_index every experts module of ``model`` is called with (what the MoE really used)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.calls: list[list[torch.Tensor]] = [[] for _ in model.model.layers]
        self._handles = [layer.mlp.experts.register_forward_pre_hook(self._hook(i))
                         for i, layer in enumerate(model.model.layers)]

    def _hook(self, layer: int):
        def hook(module, args):
            self.calls[layer].append(args[1].detach().clone())
        return hook

    def stacked(self, call: int = -1) -> torch.Tensor:
        """(tokens, layers, k) of one forward."""
        return torch.stack([calls[call] for calls in self.calls], dim=1)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
