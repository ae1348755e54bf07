"""Shared runs for the checkpoint tests: a tiny Llama trained under FSDP2 on 2 (and 1) gloo CPU ranks, saved with
FSDPCheckpointManager, and the numbers the tests compare (params after a step, log-probs, RNG draws).

The ranks are spawned (tests/helpers/ranks.py says why not forked); the results come back in a dict.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_model import tiny_llama
from tests.helpers.tiny_tokenizer import build_tiny_tokenizer

LR = 1e-2
WARMUP = 3  # lr 0, 1/3, 2/3, 1 x LR: a scheduler that was not restored changes the next update
SAVE_CONTENTS = ["model", "optimizer", "extra", "hf_model"]


def train_ids(rank: int) -> torch.Tensor:
    return torch.randint(3, 128, (2, 8), generator=torch.Generator().manual_seed(100 + rank))


def eval_ids() -> torch.Tensor:
    return torch.randint(3, 128, (3, 10), generator=torch.Generator().manual_seed(7))


def token_log_probs(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """log p(x_t | x_<t) of every token after the first."""
    with torch.no_grad():
        logits = model(input_ids=ids).logits.float()
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


def build(seed: int):
    from torch.distributed.fsdp import fully_shard

    from verl.utils.torch_functional import get_constant_schedule_with_warmup

    model = tiny_llama(seed=seed)
    for layer in model.model.layers:
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    return model, optimizer, get_constant_schedule_with_warmup(optimizer, WARMUP)


def train_step(model, optimizer, scheduler, ids: torch.Tensor) -> float:
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    scheduler.step()
    return loss.item()


def full_params(model) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def manager(model, optimizer, scheduler, contents=None):
    from verl.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.trainer.config import CheckpointConfig

    contents = list(contents or SAVE_CONTENTS)
    return FSDPCheckpointManager(model, optimizer, scheduler, build_tiny_tokenizer(),
                                 CheckpointConfig(save_contents=contents, load_contents=contents))


def _two_rank_run(rank: int, world: int, port: int, root: str, results) -> None:
    """Train 2 steps, save, continue 1 step; then a fresh model (other init, other RNG) loads and repeats step 3."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        torch.manual_seed(rank)
        model, optimizer, scheduler = build(seed=0)
        for _ in range(2):
            train_step(model, optimizer, scheduler, train_ids(rank))
        ckpt = os.path.join(root, f"world{world}")
        manager(model, optimizer, scheduler).save(ckpt, global_step=2)
        out: dict[str, Any] = {"log_probs": token_log_probs(model, eval_ids()), "draw": torch.rand(4)}
        out["loss3"] = train_step(model, optimizer, scheduler, train_ids(rank))
        out["full3"] = full_params(model)

        torch.manual_seed(1234)
        model, optimizer, scheduler = build(seed=1)
        manager(model, optimizer, scheduler).load(ckpt)
        out["resumed_draw"] = torch.rand(4)
        out["resumed_lr"] = scheduler.get_last_lr()[0]
        out["resumed_loss3"] = train_step(model, optimizer, scheduler, train_ids(rank))
        out["resumed_full3"] = full_params(model)
        results[(world, rank)] = out
    finally:
        dist.destroy_process_group()


def _one_rank_from_two(rank: int, port: int, root: str, results) -> None:
    """Load the 2-rank checkpoint into 1 rank (resharding) and take step 3 on both ranks' data at once."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        model, optimizer, scheduler = build(seed=1)
        manager(model, optimizer, scheduler).load(os.path.join(root, "world2"))
        loss = train_step(model, optimizer, scheduler, torch.cat([train_ids(0), train_ids(1)]))
        results["resharded"] = {"loss3": loss, "full3": full_params(model)}
    finally:
        dist.destroy_process_group()


def run_all(root: str) -> dict:
    results = run_ranks(_two_rank_run, 2, free_port(), root, nprocs=2)
    results.update(run_ranks(_two_rank_run, 1, free_port(), root, nprocs=1))
    results.update(run_ranks(_one_rank_from_two, free_port(), root, nprocs=1))
    return results
