"""The merged weights the vLLM sync streams from a LoRA actor sharded over 2 gloo ranks: every HF name of the plain
model once (the tied lm_head too), each equal to W + scaling * B @ A of the unsharded peft model, in the engine's
dtype."""

from __future__ import annotations

import os

import pytest
import torch

from tests.helpers.tiny_model import tiny_llama


def _stream(rank: int, port: int, results) -> None:
    import torch.distributed as dist

    from verl.models import lora
    from verl.workers.fsdp_utils import apply_fsdp2, create_device_mesh
    from verl.workers.sharding_manager.fsdp_vllm import merged_lora_named_weights

    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        module = lora.add_lora(tiny_llama(), 4, 8, "all-linear")
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():  # a trained-looking adapter (B starts at zero), the same on both ranks
            for name, param in module.named_parameters():
                if ".lora_" in name:
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.1)
        expected = lora.merge_lora_weights(module.state_dict(), 2.0)
        scalings = lora.lora_scalings(module)

        class _Cfg:  # the FSDPEngineConfig fields apply_fsdp2 reads
            param_offload = optimizer_offload = False
            reshard_after_forward = True

            class mixed_precision:  # noqa: N801
                param_dtype, reduce_dtype = "fp32", "fp32"

        sharded = apply_fsdp2(module, _Cfg(), create_device_mesh(2))
        names, worst, dtypes = [], 0.0, set()
        for name, tensor in merged_lora_named_weights(sharded, torch.bfloat16, True, scalings):
            names.append(name)
            dtypes.add(str(tensor.dtype))
            worst = max(worst, (tensor.float() - expected[name].to(torch.bfloat16).float()).abs().max().item())
        if rank == 0:
            results["out"] = {"names": names, "expected": sorted(expected), "worst": worst, "dtypes": dtypes,
                              "scalings": set(scalings.values())}
        # both ranks past every collective before either tears gloo down: a rank that closed its pairs while the
        # other still read from them aborted once ("terminate called without an active exception")
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(200)
def test_lora_sync_streams_the_merged_plain_model_from_shards():
    from tests.helpers.ranks import free_port, run_ranks

    out = run_ranks(_stream, free_port(), nprocs=2, timeout_s=180)["out"]
    assert out["scalings"] == {2.0}
    assert len(out["names"]) == len(set(out["names"]))  # each name once
    assert sorted(out["names"]) == sorted(set(out["expected"]) | {"lm_head.weight"})
    assert not any("lora" in n or "base_layer" in n for n in out["names"])
    assert out["dtypes"] == {"torch.bfloat16"} and out["worst"] == 0.0  # merged in fp32, then cast
