"""Ulysses sequence parallelism on 2 gloo ranks (one SP group, dp=1) against sp=1 on one process: the same
log-probs, entropies, values, losses and updated weights, with packed micro-batches of unequal sequences whose
packed length is odd (so the row is padded to a multiple of sp), grouped-query attention and gradient
checkpointing on the actor; and the actor's pad_to_length bucket rounded up to a multiple of sp."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist

from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import rollout_batch, tiny_llama, tiny_llama_config
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.critic.test_dp_critic import critic_config
from verl.models.value_head import build_value_model
from verl.utils.ulysses import create_ulysses_group, set_ulysses_sequence_parallel_group
from verl.workers.actor import DataParallelPPOActor
from verl.workers.critic import DataParallelPPOCritic

WORLD = 2
LR = 0.5
# micro-batches of 3 rows: 13 + 9 = 22 and 8 + 11 = 19 packed tokens (odd: one pad token at sp=2)
PROMPTS = [6, 2, 5, 1, 4, 3]
RESPONSES = [5, 1, 3, 5, 2, 4]
ACTOR_CFG = {"use_remove_padding": True, "ppo_mini_batch_size": 6, "ppo_micro_batch_size_per_gpu": 3,
             "entropy_coeff": 0.01, "use_kl_loss": True, "grad_clip": 1e6}
CRITIC_CFG = {"model.use_remove_padding": True, "ppo_mini_batch_size": 6, "ppo_micro_batch_size_per_gpu": 3,
              "forward_micro_batch_size_per_gpu": 3, "grad_clip": 1e6}


def _actor_data(model):
    data = rollout_batch(PROMPTS, RESPONSES, meta_info={"temperature": 0.7, "micro_batch_size": 3})
    old, _ = DataParallelPPOActor(actor_config(use_remove_padding=True), copy.deepcopy(model)).compute_log_prob(data)
    gen = torch.Generator().manual_seed(7)
    data.batch["old_log_probs"] = old + 0.05 * torch.randn(old.shape, generator=gen)
    data.batch["advantages"] = torch.randn(old.shape, generator=gen) * data.batch["response_mask"]
    data.batch["ref_log_prob"] = old + 0.1 * torch.randn(old.shape, generator=gen)
    return data


def _critic_data():
    data = rollout_batch(PROMPTS, RESPONSES, meta_info={"micro_batch_size": 3})
    gen = torch.Generator().manual_seed(8)
    data.batch["values"] = 0.1 * torch.randn(data.batch["responses"].shape, generator=gen)
    data.batch["returns"] = torch.randn(data.batch["responses"].shape, generator=gen)
    return data


def _critic_model():
    torch.manual_seed(3)  # one kv head: fewer than the 2 ranks, so the kv heads are repeated before the all-to-all
    return build_value_model(tiny_llama_config(num_key_value_heads=1), score_init_std=0.5).float()


def _shard(model):
    from torch.distributed.fsdp import fully_shard

    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    return model


def _run_actor(model, data, sp: int):
    actor = DataParallelPPOActor(actor_config(ulysses_sequence_parallel_size=sp, **ACTOR_CFG), model,
                                 torch.optim.SGD(model.parameters(), lr=LR))
    log_probs, entropy = actor.compute_log_prob(data, calculate_entropy=True)
    metrics = actor.update_policy(data)
    return log_probs, entropy, metrics


def _run_critic(model, data, sp: int):
    critic = DataParallelPPOCritic(critic_config(ulysses_sequence_parallel_size=sp, **CRITIC_CFG), model,
                                   torch.optim.SGD(model.parameters(), lr=LR))
    values = critic.compute_values(data)
    metrics = critic.update_critic(data)
    return values, metrics


def _params(model) -> dict[str, torch.Tensor]:
    return {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone()
            for k, v in model.state_dict().items()}


def _max_diff(a, b) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def _worker(rank: int, port: int, results) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        group = create_ulysses_group(WORLD, "actor")
        set_ulysses_sequence_parallel_group(group)
        out = {}
        # actor, GQA with 2 kv heads for 4 query heads
        base = tiny_llama(seed=1, num_key_value_heads=2)
        # recomputed layers run in the backward, outside the forward's SP context: they must still split heads
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        data = _actor_data(base)
        ref_model = copy.deepcopy(base)
        ref_lp, ref_ent, ref_metrics = _run_actor(ref_model, data, sp=1)
        model = _shard(copy.deepcopy(base))
        lp, ent, metrics = _run_actor(model, data, sp=2)
        mask = data.batch["response_mask"].bool()
        out["log_probs"] = (lp - ref_lp)[mask].abs().max().item()
        out["entropy"] = (ent - ref_ent)[mask].abs().max().item()
        out["padding_zero"] = bool((lp[~mask] == 0).all() and (ent[~mask] == 0).all())
        out["actor_moved"] = _max_diff(_params(ref_model), _params(base))
        out["actor_params"] = _max_diff(_params(model), _params(ref_model))
        out["actor_metrics"] = {k: (metrics[k], ref_metrics[k]) for k in
                                ("actor/pg_loss", "actor/entropy", "actor/kl_loss", "actor/grad_norm")}
        # fsdp_config.pad_to_length: a bucket of 5 becomes 6 at sp=2, so each rank's shard needs no pad of its own
        bucketed = _shard(copy.deepcopy(base))
        widths = []
        bucketed.get_input_embeddings().register_forward_pre_hook(lambda _m, args: widths.append(args[0].shape[-1]))
        config = actor_config(ulysses_sequence_parallel_size=2, **ACTOR_CFG,
                              **{"fsdp_config.pad_to_length": True, "fsdp_config.pad_to_length_bucket": 5})
        bucket_lp, _ = DataParallelPPOActor(config, bucketed).compute_log_prob(data)
        out["bucket_log_probs"] = (bucket_lp - ref_lp)[mask].abs().max().item()
        out["bucket_widths"] = widths
        # critic
        cbase = _critic_model()
        cdata = _critic_data()
        cref = copy.deepcopy(cbase)
        ref_values, ref_cmetrics = _run_critic(cref, cdata, sp=1)
        cmodel = _shard(copy.deepcopy(cbase))
        values, cmetrics = _run_critic(cmodel, cdata, sp=2)
        out["values"] = (values - ref_values).abs().max().item()
        out["critic_moved"] = _max_diff(_params(cref), _params(cbase))
        out["critic_params"] = _max_diff(_params(cmodel), _params(cref))
        out["critic_metrics"] = {k: (cmetrics[k], ref_cmetrics[k]) for k in ("critic/vf_loss", "critic/grad_norm")}
        results[rank] = out
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(150)
def test_sp2_matches_sp1_for_actor_and_critic():
    results = run_ranks(_worker, free_port(), nprocs=WORLD, timeout_s=140)
    for rank in range(WORLD):
        out = results[rank]
        assert out["log_probs"] < 1e-5 and out["entropy"] < 1e-5, out
        assert out["padding_zero"]
        assert out["bucket_log_probs"] < 1e-5, out  # 22 and 19 packed tokens padded to 24: 12 per rank
        assert out["bucket_widths"] == [12, 12], out
        assert out["values"] < 1e-5, out
        assert out["actor_moved"] > 1e-3 and out["critic_moved"] > 1e-3  # the steps really moved the weights
        # one SGD step each: the weights differ by lr * (gradient difference)
        assert out["actor_params"] < 1e-5 and out["critic_params"] < 1e-5, out
        for key, (got, want) in {**out["actor_metrics"], **out["critic_metrics"]}.items():
            assert got == pytest.approx(want, rel=1e-4, abs=1e-6), key
