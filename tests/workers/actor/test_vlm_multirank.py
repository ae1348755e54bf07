"""A tiny Qwen2.5-VL / Qwen3-VL sharded over 2 gloo ranks (FSDP2 wraps each vision block) where rank 0's rows hold images and
rank 1's hold none: the rollout's generate, the actor's log-probs (padded and packed) and an update all finish
(rank 1 runs the vision tower on a blank image, so the vision blocks' collectives match), the log-probs equal one
unsharded process's, and the update moves the vision tower the same on both ranks."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from tests.helpers.tiny_vlm import collated_vlm_prompts, tiny_vlm
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.actor.test_vlm_actor import vlm_batch
from tests.workers.rollout.test_hf_rollout import rollout_config
from tests.workers.rollout.test_hf_rollout_vlm import gen_batch

IMAGES = (1, 2, 0, 0)  # rank 0 gets rows 0-1 (images), rank 1 rows 2-3 (text only)


class _FsdpCfg:  # the FSDPEngineConfig fields apply_fsdp2 reads
    param_offload = optimizer_offload = False
    reshard_after_forward = True

    class mixed_precision:  # noqa: N801
        param_dtype, reduce_dtype = "fp32", "fp32"


def _rank(rank: int, port: int, family: str, data, prompts, results) -> None:
    import torch.distributed as dist

    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh, unsharded
    from verl.workers.rollout import HFRollout

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        module = apply_fsdp2(tiny_vlm(family).train(), _FsdpCfg(), create_device_mesh(2))
        mine = slice(2 * rank, 2 * rank + 2)
        rollout = HFRollout(module, rollout_config(response_length=3, temperature=1.0), micro_batch_size=2)
        with unsharded(module):  # as the worker's FSDP->HF sharding manager holds it for generation
            generated = rollout.generate_sequences(prompts[mine])
        out = {"generated": generated.batch["responses"].shape}
        shard = data[mine]
        for rmpad in (False, True):
            actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), module)
            out[f"log_probs_{rmpad}"], _ = actor.compute_log_prob(shard)
        shard.batch["old_log_probs"] = out["log_probs_True"]
        shard.batch["advantages"] = torch.ones_like(out["log_probs_True"]) * shard.batch["response_mask"]
        actor.actor_optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
        before = {k: v.full_tensor().detach().clone() for k, v in module.named_parameters() if ".visual." in f".{k}"}
        actor.update_policy(shard)
        out["vision_moved"] = {k: float((v.full_tensor() - before[k]).abs().max())
                               for k, v in module.named_parameters() if k in before}
        out["vision_after"] = {k: v.full_tensor().detach().clone() for k, v in module.named_parameters() if k in before}
        results[rank] = out
        dist.barrier()  # both ranks past every collective before either tears gloo down
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])  # Qwen3-VL: deepstack features too
def test_ranks_without_images_join_the_vision_towers_collectives(tmp_path, family):
    from tests.helpers.ranks import free_port, run_ranks
    from verl.workers.actor import DataParallelPPOActor

    data = vlm_batch(tmp_path / "actor", family, prompt_images=IMAGES, response_lengths=(5, 2, 4, 1))
    batch, tokenizer, _ = collated_vlm_prompts(tmp_path / "rollout", family, IMAGES)
    prompts = gen_batch(batch, tokenizer, do_sample=False)
    expected, _ = DataParallelPPOActor(actor_config(), copy.deepcopy(tiny_vlm(family))).compute_log_prob(data)

    results = run_ranks(_rank, free_port(), family, data, prompts, nprocs=2, timeout_s=280)
    mask = data.batch["response_mask"].bool()
    for rank in (0, 1):
        assert tuple(results[rank]["generated"]) == (2, 3)
        for rmpad in (False, True):
            got = results[rank][f"log_probs_{rmpad}"]
            torch.testing.assert_close(got[mask[2 * rank: 2 * rank + 2]],
                                       expected[2 * rank: 2 * rank + 2][mask[2 * rank: 2 * rank + 2]],
                                       rtol=1e-4, atol=1e-4)
    # rank 0's images train the tower; rank 1's zero gradients average in, and both ranks hold the same weights
    assert max(results[0]["vision_moved"].values()) > 0
    for name, tensor in results[0]["vision_after"].items():
        assert torch.equal(tensor, results[1]["vision_after"][name]), name
