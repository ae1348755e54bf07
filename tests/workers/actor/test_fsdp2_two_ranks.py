"""The actor and HF rollout on an FSDP2 (fully_shard) module, 2 CPU ranks over gloo.

Checks what only shows up with real sharding: log-probs equal the plain module's, the update equals the average
of the per-rank plain updates (FSDP averages grads; the clipped norm is reduced over ranks), dynamic batch sizes
with different micro-batch counts per rank do not hang, and generate keeps ranks in lockstep when one rank's
rows finish earlier.
"""

import copy

import pytest
import torch
import torch.distributed as dist

from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import EOS_ID, PAD_ID, left_padded_prompts, tiny_llama
from tests.workers.actor.test_dp_actor import actor_config, training_batch
from verl.protocol import DataProto
from verl.trainer.config import RolloutConfig
from verl.workers.actor import DataParallelPPOActor
from verl.workers.rollout import HFRollout

WORLD = 2
LR = 0.5
GRAD_CLIP = 0.1  # well below the grad norm (~2.7): the clipping path on DTensor grads is exercised


def _plain_update(model, shard):
    model = copy.deepcopy(model)
    actor = DataParallelPPOActor(actor_config(ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1), model,
                                 torch.optim.SGD(model.parameters(), lr=LR))
    actor.update_policy(shard)
    return {k: v.detach() for k, v in model.state_dict().items()}


def _rollout_config() -> RolloutConfig:
    return RolloutConfig(temperature=1.0, top_k=-1, top_p=1.0, do_sample=True, response_length=6)


def _prompts(rank, eos):
    ids, mask, pos = left_padded_prompts([6, 3, 5, 1], 6, seed=rank)
    return DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": pos},
                               meta_info={"eos_token_id": eos, "pad_token_id": PAD_ID, "do_sample": False})


def _worker(rank: int, port: int, results) -> None:
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        plain = tiny_llama()
        data = training_batch(plain)
        shard = data[rank * 2 : (rank + 1) * 2]
        # FSDP averages the ranks' grads: g = mean(g0, g1), read off unclipped plain SGD steps w - lr * g_i;
        # then clipped to GRAD_CLIP by the norm of the averaged grad.
        start = {k: v.detach() for k, v in plain.state_dict().items()}
        avg_grad = {k: (2 * start[k] - a - b) / (2 * LR) for (k, a), b in
                    zip(_plain_update(plain, data[0:2]).items(), _plain_update(plain, data[2:4]).values())}
        unique = [name for name, _ in plain.named_parameters()]  # the tied lm_head appears once
        norm = torch.sqrt(sum((avg_grad[name].double() ** 2).sum() for name in unique)).item()
        coef = min(1.0, GRAD_CLIP / (norm + 1e-6))
        expected = {k: start[k] - LR * coef * avg_grad[k] for k in start}
        plain_log_probs, _ = DataParallelPPOActor(actor_config(), plain).compute_log_prob(shard)
        # greedy generation of the plain model, with a per-rank EOS so ranks finish at different steps
        eos = int(HFRollout(plain, _rollout_config()).generate_sequences(_prompts(rank, EOS_ID))
                  .batch["responses"][0, rank])
        plain_gen = HFRollout(plain, _rollout_config()).generate_sequences(_prompts(rank, eos)).batch

        model = copy.deepcopy(plain)
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        actor = DataParallelPPOActor(actor_config(ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=1,
                                                  grad_clip=GRAD_CLIP), model,
                                     torch.optim.SGD(model.parameters(), lr=LR))
        log_probs, _ = actor.compute_log_prob(shard)
        # rank 0's rows hold 11 + 4 tokens, rank 1's 8 + 4: a budget of 12 gives 2 vs 1 micro-batches locally
        dyn_meta = {**shard.meta_info, "use_dynamic_bsz": True, "max_token_len": 12}
        dyn_log_probs, _ = actor.compute_log_prob(DataProto(batch=shard.batch, meta_info=dyn_meta))
        gen = HFRollout(model, _rollout_config()).generate_sequences(_prompts(rank, eos)).batch
        metrics = actor.update_policy(shard)
        after = {k: v.full_tensor().detach() for k, v in model.state_dict().items()}
        results[rank] = {
            "log_probs": torch.allclose(log_probs, plain_log_probs, atol=1e-5),
            "dynamic": torch.allclose(dyn_log_probs, plain_log_probs, atol=1e-5),
            "update": max((after[k] - expected[k]).abs().max().item() for k in expected),
            "generate": torch.equal(gen["responses"], plain_gen["responses"]),
            "stopped_early": int(gen["response_mask"][0].sum()),
            "grad_norm": (metrics["actor/grad_norm"][0], norm),
        }
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_actor_and_rollout_under_fsdp2_on_two_ranks():
    results = run_ranks(_worker, free_port(), nprocs=WORLD, timeout_s=100)
    for rank in range(WORLD):
        r = results[rank]
        assert r["log_probs"] and r["dynamic"] and r["generate"], (rank, r)
        assert r["update"] < 1e-5, (rank, r)
        assert r["grad_norm"][0] == pytest.approx(r["grad_norm"][1], rel=1e-4), (rank, r)
        assert r["stopped_early"] <= rank + 1, (rank, r)
