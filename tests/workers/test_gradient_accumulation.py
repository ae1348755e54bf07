"""Gradient accumulation on FSDP2 over gloo (2 CPU ranks): on CPU every unit is all-gathered and reduce-scattered
once per optimizer step, not per micro-batch, with the same update; log-probs over several micro-batches gather
once; the units' own resharding comes back afterwards (the root keeps its weights from forward to backward); a NaN
loss in the middle of the accumulation leaves no gradient behind."""

import copy

import pytest
import torch
import torch.distributed as dist

from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import tiny_llama
from tests.workers.actor.test_dp_actor import actor_config, training_batch
from verl.trainer.config import FSDPEngineConfig, MixedPrecisionConfig
from verl.workers.actor import DataParallelPPOActor, NonFiniteLossError

# fp32 compute: the sharded updates are compared with the plain fp32 module to 1e-5
FP32 = FSDPEngineConfig(mixed_precision=MixedPrecisionConfig(param_dtype="fp32"))

WORLD = 2
LR = 0.5


def _sharded(plain):
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh

    return apply_fsdp2(copy.deepcopy(plain), FP32, create_device_mesh(WORLD))


def _actor(model):
    # 4 rows per rank, 1 per micro-batch: 4 backwards per optimizer step
    cfg = actor_config(ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=1)
    return DataParallelPPOActor(cfg, model, torch.optim.SGD(model.parameters(), lr=LR))


def _full_params(model):
    return {k: v.full_tensor().detach().clone() for k, v in model.state_dict().items()}


def _worker(rank: int, port: int, results) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    calls = []
    gathers = []
    real_reduce_scatter, real_all_gather = dist.reduce_scatter_single, dist.all_gather_single

    def counting(*args, **kwargs):
        calls.append(1)
        return real_reduce_scatter(*args, **kwargs)

    def counting_gathers(*args, **kwargs):
        gathers.append(1)
        return real_all_gather(*args, **kwargs)

    dist.reduce_scatter_single, dist.all_gather_single = counting, counting_gathers
    try:
        plain = tiny_llama()
        data = training_batch(plain, seed=rank, micro_batch_size=1)
        layers = len(plain.model.layers)
        groups = layers + 1  # one FSDP unit per layer, and the root

        # the same step with a reduce-scatter after every micro-batch (what an accelerator does)
        every = _sharded(plain)
        actor = _actor(every)
        gathers.clear()
        log_probs, _ = actor.compute_log_prob(data)  # 4 micro-batches of 1 row
        gathers_log_prob = len(gathers)
        from verl.workers import micro_batching
        real_init = micro_batching.GradientAccumulation.__init__

        def never_defer(self, module, n):
            real_init(self, module, n)
            self.defer = False

        micro_batching.GradientAccumulation.__init__ = never_defer
        calls.clear()
        gathers.clear()
        actor.update_policy(data)
        calls_every, gathers_every = len(calls), len(gathers)
        micro_batching.GradientAccumulation.__init__ = real_init
        expected = _full_params(every)

        deferred = _sharded(plain)
        calls.clear()
        gathers.clear()
        _actor(deferred).update_policy(data)
        calls_deferred, gathers_deferred = len(calls), len(gathers)
        got = _full_params(deferred)

        # a NaN in micro-batch 2 of 4: micro-batches 0 and 1 were already back-propagated, unreduced
        poisoned = copy.deepcopy(data)
        poisoned.batch["advantages"][2, 0] = float("nan")
        after_nan = _sharded(plain)
        actor = _actor(after_nan)
        try:
            actor.update_policy(poisoned)
            raised = False
        except NonFiniteLossError:
            raised = True
        untouched = max((_full_params(after_nan)[k] - p).abs().max().item()
                        for k, p in _full_params(_sharded(plain)).items())
        actor.update_policy(data)  # must equal a fresh model's step: nothing from the aborted one remains
        after = _full_params(after_nan)
        plain_log_probs, _ = DataParallelPPOActor(actor_config(), plain).compute_log_prob(data)
        results[rank] = {
            "groups": groups, "layers": layers, "calls_every": calls_every, "calls_deferred": calls_deferred,
            "gathers_log_prob": gathers_log_prob, "gathers_every": gathers_every, "gathers_deferred": gathers_deferred,
            "log_probs": (log_probs - plain_log_probs).abs().max().item(), "raised": raised,
            "untouched": untouched,
            "deferred_vs_every": max((got[k] - expected[k]).abs().max().item() for k in expected),
            "after_nan_vs_every": max((after[k] - expected[k]).abs().max().item() for k in expected),
        }
    finally:
        dist.reduce_scatter_single, dist.all_gather_single = real_reduce_scatter, real_all_gather
        dist.destroy_process_group()


@pytest.mark.timeout(150)
def test_fsdp2_reduces_once_per_step_on_cpu_and_drops_grads_of_an_aborted_step():
    results = run_ranks(_worker, free_port(), nprocs=WORLD, timeout_s=130)
    for rank in range(WORLD):
        r = results[rank]
        assert r["gathers_log_prob"] == r["groups"], r  # once per unit for 4 micro-batches of log-probs
        assert r["log_probs"] < 1e-5, r
        assert r["calls_every"] == 4 * r["groups"], r  # every unit after every micro-batch
        # layers gathered for forward and again for backward, the root once (restored after the log-prob stretch)
        assert r["gathers_every"] == 4 * (2 * r["layers"] + 1), r
        assert r["calls_deferred"] == r["groups"], r  # every unit once, after the last
        assert r["gathers_deferred"] == r["groups"], r
        assert r["deferred_vs_every"] < 1e-6, r
        assert r["raised"] and r["untouched"] == 0.0, r
        assert r["after_nan_vs_every"] < 1e-6, r
