"""The SFT loss: hand-computed NLL on fixed logits, packing by hand, packed == padded on a tiny Llama."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from tests.helpers.tiny_model import tiny_llama
from verl.trainer.sft.loss import count_trained_tokens, pack, sft_nll_sum, trained_positions


class FixedLogits(torch.nn.Module):
    """Vocab {0, 1}; every position predicts token 1 with probability 3/4 (logits [0, log 3])."""

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        logits = torch.zeros(*input_ids.shape, 2)
        logits[..., 1] = math.log(3.0)
        return SimpleNamespace(logits=logits)


def test_nll_on_fixed_logits_by_hand():
    batch = {"input_ids": torch.tensor([[0, 1, 1, 0, 0]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 0]]),
             "position_ids": torch.tensor([[0, 1, 2, 3, 3]]), "loss_mask": torch.tensor([[0, 1, 1, 0, 0]])}
    # trained positions 1 and 2 predict token 1 (p = 3/4) and token 0 (p = 1/4)
    expected = -math.log(3 / 4) - math.log(1 / 4)
    for packed in (False, True):
        nll, tokens = sft_nll_sum(FixedLogits(), batch, use_remove_padding=packed)
        assert tokens.item() == 2 and count_trained_tokens(batch) == 2
        assert nll.item() == pytest.approx(expected, rel=1e-6)


def test_loss_mask_on_padding_is_ignored():
    # a (buggy) custom dataset marking a position whose next token is padding: it must not count
    batch = {"input_ids": torch.tensor([[1, 1, 0]]), "attention_mask": torch.tensor([[1, 1, 0]]),
             "position_ids": torch.tensor([[0, 1, 1]]), "loss_mask": torch.tensor([[1, 1, 1]])}
    nll, tokens = sft_nll_sum(FixedLogits(), batch, use_remove_padding=False)
    assert tokens.item() == 1 and nll.item() == pytest.approx(-math.log(3 / 4))
    nll, tokens = sft_nll_sum(FixedLogits(), batch, use_remove_padding=True)
    assert tokens.item() == 1 and nll.item() == pytest.approx(-math.log(3 / 4))


def test_pack_by_hand():
    batch = {"input_ids": torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]]),
             "attention_mask": torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]),
             "loss_mask": torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]])}
    packed = pack(batch)
    assert packed["input_ids"].tolist() == [[5, 6, 7, 8, 9]]
    assert packed["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    # the last token of each sample predicts nothing (its neighbour belongs to the next sample)
    assert packed["loss_mask"].tolist() == [[0, 1, 0, 1, 0]]


def test_pack_refuses_left_padding():
    batch = {"input_ids": torch.tensor([[0, 5]]), "attention_mask": torch.tensor([[0, 1]]),
             "loss_mask": torch.tensor([[0, 0]])}
    with pytest.raises(ValueError, match="right-padded"):
        pack(batch)


def _batch(lengths: list[int], width: int, seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    input_ids = torch.zeros(len(lengths), width, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    loss_mask = torch.zeros_like(input_ids)
    for row, n in enumerate(lengths):
        input_ids[row, :n] = torch.randint(3, 128, (n,), generator=gen)
        attention_mask[row, :n] = 1
        loss_mask[row, n // 2 : n - 1] = 1  # the second half is the "response"
    position_ids = torch.clamp(attention_mask.cumsum(-1) - 1, min=0)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": position_ids,
            "loss_mask": loss_mask}


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_packed_equals_padded_on_tiny_llama(attn):
    model = tiny_llama(seed=3)
    model.config._attn_implementation = attn
    batch = _batch([9, 4, 12, 6], width=14)
    grads = []
    values = []
    for packed in (False, True):
        model.zero_grad()
        nll, tokens = sft_nll_sum(model, batch, use_remove_padding=packed)
        (nll / tokens).backward()
        values.append((nll.item(), tokens.item()))
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert values[0][1] == values[1][1] == count_trained_tokens(batch)
    assert values[0][0] == pytest.approx(values[1][0], rel=1e-5)
    # both run the LM head on trained positions only; the plain full-logits computation agrees
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       position_ids=batch["position_ids"]).logits
    mask = trained_positions(batch)
    plain = torch.nn.functional.cross_entropy(logits[:, :-1][mask], batch["input_ids"][:, 1:][mask], reduction="sum")
    assert values[0][0] == pytest.approx(plain.item(), rel=1e-5)
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)
