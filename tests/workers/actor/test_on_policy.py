"""Skipping the old-log-prob pass (meta_info["on_policy"]) on the real DataParallelPPOActor: the update's losses,
metrics and parameter gradients equal those of compute_log_prob-then-update, padded and packed; actor/entropy
equals the driver's aggregate of the pass's entropies; the actor refuses a batch where the skip would not be exact.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.distributed as dist

from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import rollout_batch, tiny_llama
from tests.workers.actor.test_dp_actor import actor_config
from verl.algos import agg_loss
from verl.workers.actor import DataParallelPPOActor
from verl.workers.actor.on_policy import ON_POLICY_META_KEY, EntropyTally

PROMPTS = [6, 2, 5, 1, 4, 6]
RESPONSES = [5, 1, 3, 5, 2, 4]  # a one-token and full-length responses: micro-batches of unequal token counts
ROWS = len(PROMPTS)
MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


class RecordingSGD(torch.optim.SGD):
    """SGD that keeps a copy of every parameter's gradient at each step (the update zeroes them afterwards)."""

    def __init__(self, named_params, lr):
        self.names, params = zip(*named_params)
        super().__init__(params, lr=lr)
        self.steps: list[dict[str, torch.Tensor]] = []

    def step(self, closure=None):
        params = self.param_groups[0]["params"]
        self.steps.append({n: p.grad.detach().clone() for n, p in zip(self.names, params) if p.grad is not None})
        return super().step(closure)


def _batch():
    data = rollout_batch(PROMPTS, RESPONSES, meta_info={"temperature": 0.7, "micro_batch_size": 4})
    gen = torch.Generator().manual_seed(3)
    mask = data.batch["response_mask"]
    data.batch["advantages"] = torch.randn(mask.shape, generator=gen) * mask
    data.batch["ref_log_prob"] = -torch.rand(mask.shape, generator=gen) * 3 * mask
    return data


def _update(model, data, **cfg):
    """(recorded optimizer steps, metrics, the driver's actor/entropy or None) for one update on a copy."""
    model = copy.deepcopy(model)
    config = actor_config(ppo_mini_batch_size=ROWS, **cfg)
    optimizer = RecordingSGD(model.named_parameters(), lr=0.5)
    actor = DataParallelPPOActor(config, model, optimizer)
    driver_entropy = None
    if not data.meta_info.get(ON_POLICY_META_KEY):  # (a): the pass, then the update, as the trainer did
        data = copy.deepcopy(data)
        old, entropys = actor.compute_log_prob(data, calculate_entropy=True)
        data.batch["old_log_probs"] = old
        driver_entropy = agg_loss(entropys, data.batch["response_mask"], config.loss_agg_mode).item()
    metrics = actor.update_policy(data)
    return optimizer.steps, metrics, driver_entropy


def _mean(value) -> float:
    return float(np.mean(value)) if isinstance(value, list) else float(value)


CASES = {
    "vanilla": {},
    "entropy_kl_loss": {"entropy_coeff": 0.01, "use_kl_loss": True},
    "dynamic_bsz": {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 11},
    "seq_mean_gspo": {"loss_agg_mode": "seq-mean-token-mean", "policy_loss.loss_mode": "gspo",
                      "ppo_micro_batch_size_per_gpu": 1},
}


@pytest.mark.parametrize("rmpad", [False, True], ids=["padded", "packed"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_skipping_the_pass_leaves_losses_metrics_and_grads_unchanged(rmpad, case):
    model = tiny_llama(seed=1)
    cfg = {"use_remove_padding": rmpad, **CASES[case]}
    with_pass, pass_metrics, driver_entropy = _update(model, _batch(), **cfg)
    skipped = _batch()
    skipped.meta_info[ON_POLICY_META_KEY] = True
    without_pass, skip_metrics, _ = _update(model, skipped, **cfg)

    assert len(with_pass) == len(without_pass) == 1  # one optimizer step
    grads_a, grads_b = with_pass[0], without_pass[0]
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 0
    assert max(grads_a[k].abs().max().item() for k in grads_a) > 1e-3  # the loss really has a gradient
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-4, atol=1e-6, msg=name)
    for key in ("actor/pg_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/ppo_kl"):
        assert _mean(skip_metrics[key]) == pytest.approx(_mean(pass_metrics[key]), rel=1e-4, abs=1e-6), key
    if "use_kl_loss" in cfg:
        assert _mean(skip_metrics["actor/kl_loss"]) == pytest.approx(_mean(pass_metrics["actor/kl_loss"]), rel=1e-5)
    # the ratio at the first forward is exactly 1 without the pass (pi_old is that forward)
    assert _mean(skip_metrics["actor/ppo_kl"]) == 0.0 and _mean(skip_metrics["actor/pg_clipfrac"]) == 0.0
    # what the pass gave the driver, the update now reports: the batch's entropy, aggregated the same way
    assert skip_metrics["actor/entropy"] == pytest.approx(driver_entropy, rel=1e-5)


@pytest.mark.parametrize("cfg", [{"ppo_epochs": 2, "ppo_mini_batch_size": ROWS},
                                 {"ppo_mini_batch_size": ROWS // 2}], ids=["epochs", "mini_batches"])
def test_actor_refuses_the_skip_for_more_than_one_optimizer_step(cfg):
    model = tiny_llama()
    data = _batch()
    data.meta_info[ON_POLICY_META_KEY] = True
    actor = DataParallelPPOActor(actor_config(**cfg), model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="exact only for one optimizer step"):
        actor.update_policy(data)


def test_actor_refuses_a_batch_with_both_old_log_probs_and_the_flag():
    model = tiny_llama()
    data = _batch()
    data.meta_info[ON_POLICY_META_KEY] = True
    data.batch["old_log_probs"] = torch.zeros_like(data.batch["advantages"])
    actor = DataParallelPPOActor(actor_config(ppo_mini_batch_size=ROWS), model,
                                 torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="carries old_log_probs"):
        actor.update_policy(data)


def _entropy_and_mask(rows=7, length=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    entropy = torch.rand(rows, length, generator=gen) * 4
    lengths = [5, 1, 0, 3, 5, 2, 4][:rows]  # one empty row: not a sequence for the seq-mean modes
    mask = (torch.arange(length)[None] < torch.tensor(lengths)[:, None]).long()
    return entropy, mask


@pytest.mark.parametrize("mode", MODES)
def test_tally_over_micro_batches_equals_the_batch_aggregate(mode):
    entropy, mask = _entropy_and_mask()
    tally = EntropyTally(mode)
    for rows in ([0, 1], [2], [3, 4, 5], [6]):  # uneven micro-batches, one of them empty
        tally.add(entropy[rows], mask[rows])
    assert tally.value() == pytest.approx(agg_loss(entropy, mask, mode).item(), rel=1e-6)


def test_tally_with_no_response_token_reports_nothing():
    tally = EntropyTally("token-mean")
    tally.add(torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.long))
    assert tally.value() is None


def _tally_rank(rank: int, port: int, results) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        entropy, mask = _entropy_and_mask()
        shard = [0, 1, 2] if rank == 0 else [3, 4, 5, 6]  # unequal token counts per rank
        for mode in MODES:
            tally = EntropyTally(mode)
            tally.add(entropy[shard], mask[shard])
            results[(rank, mode)] = tally.value()
    finally:
        dist.destroy_process_group()


def test_tally_all_reduces_over_ranks_to_the_whole_batch():
    results = run_ranks(_tally_rank, free_port(), nprocs=2, timeout_s=120)
    entropy, mask = _entropy_and_mask()
    for mode in MODES:
        expected = agg_loss(entropy, mask, mode).item()
        assert results[(0, mode)] == pytest.approx(expected, rel=1e-6), mode
        assert results[(1, mode)] == pytest.approx(expected, rel=1e-6), mode
