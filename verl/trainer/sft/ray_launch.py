"""Running the SFT ranks as Ray workers (`trainer.n_gpus_per_node` x `trainer.nnodes` > 1 without torchrun).

Each worker is an ordinary SPMD rank: the worker group sets RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, the
worker joins the process group and runs the same `run_sft` a torchrun rank would.
"""

from __future__ import annotations

import os
from typing import Any

from omegaconf import DictConfig, OmegaConf

from verl.single_controller.base import Dispatch, Worker, register

# Paths the workers read or write: made absolute on the driver, since a worker's working directory may differ.
_PATH_KEYS = ("data.train_files", "data.val_files", "model.partial_pretrain", "trainer.default_local_dir",
              "trainer.report_dir", "trainer.resume_from_path")


class SFTWorker(Worker):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.config = config

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def fit(self) -> dict[str, Any]:
        from verl.trainer.sft.trainer import run_sft

        self.init_torch_distributed()
        return run_sft(OmegaConf.create(self.config))


def _absolute(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, str):
        return value if "://" in value else os.path.abspath(os.path.expanduser(value))
    return [_absolute(v) for v in value]


def absolute_paths(config: DictConfig) -> dict[str, Any]:
    """The config as a plain dict with every path in _PATH_KEYS absolute."""
    plain = OmegaConf.to_container(config, resolve=True)
    for key in _PATH_KEYS:
        *parents, leaf = key.split(".")
        node = plain
        for part in parents:
            node = node.get(part) or {}
        if node.get(leaf) is not None:
            node[leaf] = _absolute(node[leaf])
    return plain


def run_sft_on_ray(config: DictConfig) -> dict[str, Any]:
    from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
    from verl.utils.device import is_cuda_available
    from verl.utils.ray_utils import init_ray

    per_node, nnodes = int(config.trainer.n_gpus_per_node), int(config.trainer.nnodes)
    plain = absolute_paths(config)
    init_ray(config.get("ray_kwargs"), run_dir=plain["trainer"]["default_local_dir"],
             num_cpus=max(per_node * nnodes + 1, os.cpu_count() or 1))
    pool = RayResourcePool(process_on_nodes=[per_node] * nnodes, use_gpu=is_cuda_available(), max_colocate_count=1)
    group = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=RayClassWithInitArgs(SFTWorker, config=plain),
                           name_prefix="sft")
    summaries = group.fit()
    print(f"[sft] finished on {len(summaries)} Ray workers: {summaries[0]}", flush=True)
    return summaries[0]
