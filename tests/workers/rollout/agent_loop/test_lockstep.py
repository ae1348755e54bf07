"""The agent loop on HF generate under FSDP with 2 gloo ranks: ranks with different amounts of work step in
lockstep (a rank with nothing queued joins with a dummy generation), nothing hangs, and greedy single-turn output
equals the sync rollout's on the same sharded module."""

from __future__ import annotations

import os

import pytest
import yaml

from tests.helpers.ranks import free_port, run_ranks

pytestmark = pytest.mark.e2e  # two spawned ranks, ~30 s


def _scenario(rank: int, port: int, loops_yaml: str, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    import torch
    import torch.distributed as dist

    from tests.helpers.tiny_model import VOCAB_SIZE, tiny_llama
    from tests.workers.rollout.agent_loop.helpers import arr_config, prompt_batch
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh
    from verl.workers.rollout import HFRollout
    from verl.workers.rollout.agent_loop.backends import HFBackend
    from verl.workers.rollout.agent_loop.lockstep import EngineGroup
    from verl.workers.rollout.agent_loop.manager import AgentLoopManager

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    config = arr_config(**{"rollout.agent.agent_loop_config_path": loops_yaml})
    module = apply_fsdp2(tiny_llama(), config.actor.fsdp_config, create_device_mesh(2))
    rollout = HFRollout(module, config.rollout)
    group = EngineGroup("lockstep", dist.group.WORLD, rank, 2, 0)
    manager = AgentLoopManager(config, None, lambda meta: HFBackend(rollout, meta, config.rollout.prompt_length),
                               engine_group=group)
    params = {"temperature": 0.0, "top_p": 1.0, "top_k": -1}
    # greedy single turn, same rows on both paths
    sync = rollout.generate_sequences(prompt_batch(seed=rank, do_sample=False, validate=True))
    agent = manager.generate_sequences(prompt_batch(seed=rank, do_sample=False, validate=True), params)
    same = torch.equal(sync.batch["responses"], agent.batch["responses"])
    # uneven work: rank 0 has four two-turn trajectories, rank 1 one single-turn row
    lengths = (6, 3, 5, 2) if rank == 0 else (4,)
    names = ["two_turn"] * 4 if rank == 0 else ["single_turn_agent"]
    out = manager.generate_sequences(prompt_batch(lengths=lengths, seed=rank, eos=[VOCAB_SIZE + 1],
                                                  columns={"agent_name": names, "index": list(range(len(names)))},
                                                  do_sample=False, validate=True), params)
    results[rank] = {"same": same, "rows": len(out), "steps": manager.last_stats["agent/engine_steps"],
                     "mask0": out.batch["response_mask"][0].tolist()}
    dist.destroy_process_group()


def test_ranks_with_uneven_work_step_together(tmp_path):
    loops = tmp_path / "loops.yaml"
    loops.write_text(yaml.safe_dump([{"name": "two_turn", "_target_":
                                      "tests.workers.rollout.agent_loop.test_single_turn_hf.TwoTurnAgent"}]))
    results = run_ranks(_scenario, free_port(), str(loops), nprocs=2, timeout_s=180)
    assert results[0]["same"] and results[1]["same"]
    assert results[0]["rows"] == 4 and results[1]["rows"] == 1
    assert results[0]["mask0"] == [1, 1, 0, 0, 0, 1, 1, 0]
    # both ranks ran the same number of engine rounds: rank 1's single row was done early and it kept joining
    assert results[0]["steps"] == results[1]["steps"] >= 2
