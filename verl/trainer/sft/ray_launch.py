"""Running the SFT ranks as Ray workers (`trainer.n_gpus_per_node` x `trainer.nnodes` > 1 without torchrun).

Each worker is an ordinary SPMD rank: the worker group sets RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, the
worker joins the process group and runs the same `run_sft` a torchrun rank would. The typed config travels to
the workers as it is (dataclasses pickle).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from verl.single_controller.base import Dispatch, Worker, register
from verl.trainer.config.sft import SFTTrainerConfig


class SFTWorker(Worker):
    def __init__(self, config: SFTTrainerConfig) -> None:
        super().__init__()
        self.config = config

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fit(self) -> dict[str, Any]:
        from verl.trainer.sft.trainer import run_sft

        self.init_torch_distributed()
        return run_sft(self.config)


def _absolute(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        return value if "://" in value else os.path.abspath(os.path.expanduser(value))
    return [_absolute(v) for v in value]


def absolute_paths(config: SFTTrainerConfig) -> SFTTrainerConfig:
    """A copy with every path the workers read or write made absolute: a worker's working directory may differ."""
    data, model, trainer = config.data, config.model, config.trainer
    return dataclasses.replace(
        config,
        data=dataclasses.replace(data, train_files=_absolute(data.train_files), val_files=_absolute(data.val_files)),
        model=dataclasses.replace(model, partial_pretrain=_absolute(model.partial_pretrain)),
        trainer=dataclasses.replace(trainer, default_local_dir=_absolute(trainer.default_local_dir),
                                    report_dir=_absolute(trainer.report_dir),
                                    resume_from_path=_absolute(trainer.resume_from_path)))


def run_sft_on_ray(config: SFTTrainerConfig) -> dict[str, Any]:
    from verl.single_controller.base.deadlines import WorkerDeadlines
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.utils.device import is_cuda_available, set_device_preference
    from verl.utils.ray_utils import init_ray

    per_node, nnodes = config.trainer.n_gpus_per_node, config.trainer.nnodes
    config = absolute_paths(config)
    set_device_preference(config.trainer.device)  # before Ray starts, so the workers inherit it
    init_ray({"ray_init": config.ray_kwargs.ray_init}, run_dir=config.trainer.default_local_dir,
             num_cpus=max(per_node * nnodes + 1, os.cpu_count() or 1))
    pool = RayResourcePool(process_on_nodes=[per_node] * nnodes, use_gpu=is_cuda_available(), max_colocate_count=1)
    group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(SFTWorker, config=config),
                           name_prefix="sft", deadlines=WorkerDeadlines.from_trainer(config.trainer))
    summaries = group.fit()
    print(f"[sft] finished on {len(summaries)} Ray workers: {summaries[0]}", flush=True)
    return summaries[0]
