"""A tiny Qwen2.5-VL / Qwen2-VL on one GPU, FSDP2 over nccl: the actor's log-probs with images (padded path, and
the packed path, which in bf16 on CUDA runs flash varlen attention with the 3-D mrope positions) equal one fp32
CPU process's; bf16 tracks fp32; the HF rollout generates with the images on the device and never samples a vision
token; an update in bf16 moves the vision tower. The same functions as the CPU tests
(tests/workers/actor/test_vlm_multirank.py), with the device and backend verl.utils.device picks.

Marked ``gpu``: skipped with the reason where CUDA is absent (tests/conftest.py)."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.gpu.ranks import join_one_rank, leave
from tests.helpers.ranks import free_port, run_ranks
from tests.helpers.tiny_vlm import collated_vlm_prompts, tiny_vlm
from tests.workers.actor.test_dp_actor import actor_config
from tests.workers.actor.test_vlm_actor import vlm_batch
from tests.workers.rollout.test_hf_rollout import rollout_config
from tests.workers.rollout.test_hf_rollout_vlm import gen_batch

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]

IMAGES = (1, 2, 0, 1)


def _fsdp_config(dtype: str):
    class Config:  # the FSDPEngineConfig fields apply_fsdp2 reads
        param_offload = optimizer_offload = False
        reshard_after_forward = True

        class mixed_precision:  # noqa: N801
            param_dtype, reduce_dtype = dtype, "fp32"

    return Config()


def _on(data, device):
    return copy.deepcopy(data).to(device)  # a copy: DataProto.to moves the caller's batch


def _rank(rank: int, port: int, family: str, data, prompts, results) -> None:
    from verl.models.vision import vision_token_ids
    from verl.utils.device import get_default_device, get_device_name
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh, unsharded
    from verl.workers.rollout import HFRollout

    join_one_rank(port)
    try:
        device = get_default_device()
        out: dict = {"device": get_device_name()}
        for dtype in ("fp32", "bf16"):
            model = tiny_vlm(family).to(device).train()
            module = apply_fsdp2(model, _fsdp_config(dtype), create_device_mesh(1))
            for rmpad in (False, True):
                actor = DataParallelPPOActor(actor_config(use_remove_padding=rmpad), module)
                got, _ = actor.compute_log_prob(_on(data, device))
                out[f"{dtype}_{rmpad}"] = got.float().cpu()
            if dtype != "bf16":
                continue
            torch.manual_seed(0)
            rollout = HFRollout(module, rollout_config(response_length=8, temperature=1.0), micro_batch_size=2)
            with unsharded(module):
                generated = rollout.generate_sequences(_on(prompts, device))
            responses = generated.batch["responses"].cpu()
            out["responses"] = responses
            out["vision_ids"] = sorted(vision_token_ids(model.config))
            shard = _on(data, device)
            shard.batch["old_log_probs"] = out["bf16_True"].to(device)
            gen = torch.Generator().manual_seed(0)
            shard.batch["advantages"] = (torch.randn(out["bf16_True"].shape, generator=gen).to(device)
                                         * shard.batch["response_mask"])
            actor.actor_optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
            before = {k: v.full_tensor().detach().to("cpu", torch.float32, copy=True)
                      for k, v in module.named_parameters()}
            actor.update_policy(shard)
            after = {k: v.full_tensor().detach().to("cpu", torch.float32, copy=True)
                      for k, v in module.named_parameters()}
            out["moved"] = {k for k in after if not torch.equal(after[k], before[k])}
        results[rank] = out
    finally:
        leave()


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl"])
def test_vlm_actor_and_rollout_with_images_on_the_gpu(tmp_path, family):
    from verl.utils.device import get_device_name
    from verl.workers.actor import DataParallelPPOActor

    data = vlm_batch(tmp_path / "actor", family, prompt_images=IMAGES)
    batch, tokenizer, _ = collated_vlm_prompts(tmp_path / "rollout", family, IMAGES)
    prompts = gen_batch(batch, tokenizer, do_sample=True, temperature=1.0)
    # the reference: one fp32 process on the host, padded path (equal to plain HF's, test_vlm_actor.py)
    expected, _ = DataParallelPPOActor(actor_config(), copy.deepcopy(tiny_vlm(family))).compute_log_prob(data)

    out = run_ranks(_rank, free_port(), family, data, prompts, nprocs=1, timeout_s=280)[0]
    assert out["device"] == get_device_name()
    mask = data.batch["response_mask"].bool()
    # fp32 on the device (cuDNN may run the patch-embedding convolution in TF32): the host's numbers
    for rmpad in (False, True):
        torch.testing.assert_close(out[f"fp32_{rmpad}"][mask], expected[mask], rtol=0, atol=2e-3)
    # bf16 keeps ~3 significant digits: log-probs near ln(1/vocab) agree to a few hundredths, in both paths
    for rmpad in (False, True):
        assert (out[f"bf16_{rmpad}"][mask] - expected[mask]).abs().max().item() < 3e-2, rmpad
    responses = out["responses"]
    assert responses.shape == (len(IMAGES), 8)
    assert not torch.isin(responses, torch.tensor(out["vision_ids"])).any()
    moved = out["moved"]
    assert any(".visual." in f".{k}" for k in moved), sorted(moved)[:5]
    assert any("language_model" in k for k in moved), sorted(moved)[:5]
