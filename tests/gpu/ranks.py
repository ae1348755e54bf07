"""One rank on this machine's accelerator for the gpu tests: the same worker code paths the CPU tests drive on a
gloo rank (tests/workers/test_lora_workers.py), with the device and backend chosen by verl.utils.device, so on a
GPU box the process group is nccl and the modules and batches live on CUDA."""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

from tests.trainer.config.test_key_effects import typed
from tests.workers.test_lora_workers import ARR

# the HF rollout in sync mode (no engine to start) and batch sizes of the 4-prompt x n=2 batch the CPU tests use
BASE_OVERRIDES = ("algorithm.adv_estimator=grpo", f"{ARR}.rollout.n=2", f"{ARR}.rollout.name=hf",
                  f"{ARR}.rollout.mode=sync", f"{ARR}.actor.ppo_mini_batch_size=2",
                  f"{ARR}.actor.ppo_micro_batch_size_per_gpu=2", f"{ARR}.actor.use_kl_loss=true",
                  f"{ARR}.actor.optim.lr=0.01", f"{ARR}.actor.grad_clip=1e6", "data.max_prompt_length=6",
                  "data.max_response_length=5", "critic.model.tokenizer_path=null")


def join_one_rank(port: int) -> None:
    """This process as rank 0 of 1 on the backend verl picks (nccl where CUDA is, else gloo)."""
    import torch.distributed as dist

    from verl.utils.device import get_nccl_backend, is_cuda_available
    from verl.workers import fsdp_workers

    torch.set_num_threads(1)
    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if is_cuda_available():
        torch.cuda.set_device(0)
    dist.init_process_group(get_nccl_backend(), init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    # the worker measures the matmul peak for MFU at start-up; these tests are about numerics, not speed
    fsdp_workers.measure_matmul_peak = lambda device, dtype: 1e12


def leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def actor_worker(model_dir: str, *overrides: str):
    """An ActorRolloutRefWorker (actor + ref) on this rank, model built from ``model_dir``."""
    from verl.workers import fsdp_workers

    config = typed(f"{ARR}.model.path={model_dir}", f"critic.model.path={model_dir}", *BASE_OVERRIDES, *overrides)
    worker = fsdp_workers.ActorRolloutRefWorker(config.actor_rollout_ref, "actor_rollout_ref")
    worker.init_model()
    return worker


def hf_log_probs(model_dir: str, data, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The plain HF model's response log-probs from a padded forward on the accelerator, back on the host."""
    from transformers import AutoModelForCausalLM

    from tests.workers.test_lora_workers import _hf_log_probs
    from verl.utils.device import get_default_device

    device = get_default_device()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    on_device = SimpleNamespace(batch=data.batch.to(device))  # a copy: DataProto.to would move the caller's batch
    return _hf_log_probs(model, on_device).float().to("cpu")  # compared on the host


def full_weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter unsharded, on the host (FSDP2 DTensors gathered)."""
    # a copy: on one rank full_tensor() can alias the live shard, which the optimizer then updates in place
    return {n: p.detach().full_tensor().float().to("cpu", copy=True) for n, p in module.named_parameters()}


def compute_dtypes(module: torch.nn.Module) -> dict[str, object]:
    """A hook on the first attention projection: the dtype and device its input arrives in (what FSDP2's mixed
    precision policy actually hands the matmuls)."""
    seen: dict[str, object] = {}
    target = next(m for n, m in module.named_modules() if n.endswith("q_proj"))

    def hook(_mod, args):
        seen["dtype"], seen["device"] = args[0].dtype, args[0].device.type

    target.register_forward_pre_hook(hook)
    return seen
