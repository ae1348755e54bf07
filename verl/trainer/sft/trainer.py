"""The SFT trainer (FSDPSFTTrainer) and `run_sft`, one rank's whole run; the command line is
verl/trainer/fsdp_sft_trainer.py.

One process per rank, SPMD: a plain `python -m` run is one rank (gloo on CPU); `torchrun --nproc_per_node=N -m
verl.trainer.fsdp_sft_trainer ...` gives N ranks, and `trainer.n_gpus_per_node=N` without torchrun starts the N
ranks as Ray workers. Each step: the global batch (`data.train_batch_size` samples) is split over the ranks and
into micro-batches of `data.micro_batch_size_per_gpu`; the loss is the mean NLL over every trained (response)
token of the global batch. With `ulysses_sequence_parallel_size` = sp > 1 the ranks form world / sp data-parallel
groups of sp ranks; a group reads one share of the batch and splits every packed micro-batch over its ranks
(verl/trainer/sft/loss.py). Checkpoints are HF folders that main_ppo's `actor_rollout_ref.model.path` loads (see
verl/trainer/sft/checkpoint.py); `trainer.resume_mode=auto` continues from the newest one.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any

import torch
import torch.distributed as dist

from verl.models.varlen_attention import enable_varlen_attention
from verl.trainer.config.sft import SFTTrainerConfig
from verl.trainer.run_report import write_run_report
from verl.trainer.sft.checkpoint import SFTCheckpointer, resolve_resume_dir
from verl.trainer.sft.data import build_dataloader, create_sft_dataset
from verl.trainer.sft.loss import count_trained_tokens, sft_nll_sum
from verl.trainer.sft.model import base_model_path, build_sft_module, hf_module, lora_enabled
from verl.utils.device import get_device_name, get_nccl_backend, get_torch_device, set_device_preference
from verl.utils.torch_functional import clip_grad_norm_
from verl.workers.fsdp_utils import build_lr_scheduler, build_optimizer, create_device_mesh
from verl.workers.micro_batching import GradientAccumulation


def _all_reduce_sum(value: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


class FSDPSFTTrainer:
    """Upstream's constructor: (config, device_mesh, ulysses_device_mesh, tokenizer, train_dataset, val_dataset)."""

    def __init__(self, config: SFTTrainerConfig, device_mesh, ulysses_device_mesh=None, tokenizer=None,
                 train_dataset=None, val_dataset=None, processor=None) -> None:
        """``processor``: the model folder's multi-modal processor (image-text SFT); its files go into every
        checkpoint so the saved folder loads as the same vision-language model."""
        self.config = config
        self.device_mesh = device_mesh
        self.tokenizer = tokenizer
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world_size = dist.get_world_size() if dist.is_initialized() else 1
        self.device = torch.device(get_device_name(), get_torch_device().current_device()) \
            if get_device_name() == "cuda" else torch.device("cpu")
        self.use_remove_padding = config.use_remove_padding
        self._setup_sequence_parallel(ulysses_device_mesh)
        self.micro_batch_size = config.data.micro_batch_size_per_gpu
        self.local_batch_size = config.data.train_batch_size // self.dp_size
        self._build_dataloaders(train_dataset, val_dataset)
        self.resume_dir = resolve_resume_dir(config.trainer)
        self._build_model_optimizer()
        checkpoint = config.trainer.checkpoint
        self.checkpointer = SFTCheckpointer(config.trainer.default_local_dir, tokenizer,
                                            save_contents=checkpoint.save_contents,
                                            load_contents=checkpoint.load_contents,
                                            max_ckpt_to_keep=config.trainer.max_ckpt_to_keep,
                                            processor_dir=base_model_path(config) if processor is not None else None)
        self.global_step, self.epoch, self.steps_in_epoch = 0, 0, 0
        self._pending_loader_state: dict | None = None
        self.last_checkpoint: str | None = None
        if self.resume_dir is not None:
            self._restore(self.resume_dir)

    # -- building -------------------------------------------------------------------------------------------------

    def _setup_sequence_parallel(self, ulysses_device_mesh) -> None:
        """Ulysses: the ("dp", "sp") mesh's sp group splits each packed row; the ranks of one group read the same
        samples, so the data is split over the dp ranks only. FSDP still shards over every rank."""
        self.sp_size = self.config.ulysses_sequence_parallel_size
        if self.sp_size == 1:
            self.ulysses_device_mesh, self.ulysses_group = None, None
            self.dp_size, self.dp_rank = self.world_size, self.rank
            return
        if ulysses_device_mesh is None:
            ulysses_device_mesh = create_ulysses_device_mesh(self.world_size, self.sp_size)
        self.ulysses_device_mesh = ulysses_device_mesh
        self.ulysses_group = ulysses_device_mesh.get_group("sp")
        self.dp_size, self.dp_rank = ulysses_device_mesh.size(0), ulysses_device_mesh.get_local_rank("dp")

    def _build_dataloaders(self, train_dataset, val_dataset) -> None:
        seed = self.config.trainer.seed
        if len(train_dataset) < self.config.data.train_batch_size:
            raise ValueError(f"data.train_files has {len(train_dataset)} samples, fewer than one batch of "
                             f"data.train_batch_size={self.config.data.train_batch_size}")
        self.train_dataloader, self.train_sampler = build_dataloader(
            train_dataset, self.local_batch_size, self.dp_rank, self.dp_size, seed, shuffle=True, drop_last=True)
        self.val_dataloader = None
        if val_dataset is not None and len(val_dataset) > 0:
            self.val_dataloader, _ = build_dataloader(val_dataset, self.micro_batch_size, self.dp_rank, self.dp_size,
                                                      seed, shuffle=False, drop_last=False)
        self.steps_per_epoch = len(self.train_dataloader)
        total = self.config.trainer.total_training_steps
        self.total_steps = total if total is not None else self.steps_per_epoch * self.config.trainer.total_epochs

    def _build_model_optimizer(self) -> None:
        self.fsdp_model = build_sft_module(self.config, self.device_mesh, self.resume_dir)
        if self.ulysses_group is not None:
            # attention per packed segment, after the head all-to-all (the same path as the PPO actor's)
            enable_varlen_attention(self.fsdp_model, sequence_parallel=True)
        self.lora_scaling = None
        if lora_enabled(self.config):
            self.lora_scaling = self.config.model.lora_alpha / self.config.model.lora_rank
        optim = self.config.optim.to_engine(self.total_steps)
        self.optimizer = build_optimizer(self.fsdp_model, optim, "optim")
        self.lr_scheduler = build_lr_scheduler(self.optimizer, optim, "optim")

    def _restore(self, folder: str) -> None:
        state = self.checkpointer.load(folder, self.fsdp_model, self.optimizer, self.lr_scheduler)
        self.global_step = int(state["global_step"])
        self.epoch = int(state.get("epoch", 0))
        self.steps_in_epoch = int(state.get("steps_in_epoch", 0))
        if self.steps_in_epoch >= self.steps_per_epoch:
            self.epoch, self.steps_in_epoch = self.epoch + 1, 0
        elif self.steps_in_epoch > 0:
            saved_dp = state.get("dp_size", state.get("world_size"))
            same_layout = saved_dp == self.dp_size and "dataloader" in state
            # a global batch is the same samples whatever the number of ranks (see build_dataloader), so on another
            # layout each rank just skips the batches already trained in this epoch
            self._pending_loader_state = state["dataloader"] if same_layout else {"skip_batches": self.steps_in_epoch}
        if self.rank == 0:
            print(f"[sft] resumed from {folder} at step {self.global_step} (epoch {self.epoch})", flush=True)

    def _position_loader(self, state: dict) -> None:
        if "skip_batches" not in state:
            self.train_dataloader.load_state_dict(state)
            return
        batches = iter(self.train_dataloader)
        for _ in range(int(state["skip_batches"])):
            next(batches)
        self.train_dataloader.load_state_dict(self.train_dataloader.state_dict())

    # -- steps ----------------------------------------------------------------------------------------------------

    def _micro_batches(self, batch: dict[str, Any]) -> list[dict[str, Any]]:
        """Slices of micro_batch_size rows on this rank's device; a per-row list (an image batch's
        multi_modal_inputs) is sliced with its rows."""
        size = batch["input_ids"].size(0)

        def moved(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return value.to(self.device)
            if isinstance(value, dict):
                return {k: moved(v) for k, v in value.items()}
            if isinstance(value, list):
                return [moved(v) for v in value]
            return value

        return [{k: moved(v[i : i + self.micro_batch_size]) for k, v in batch.items()}
                for i in range(0, size, self.micro_batch_size)]

    def training_step(self, batch: dict[str, torch.Tensor]) -> dict[str, float]:
        start = time.perf_counter()
        self.fsdp_model.train()
        micro_batches = self._micro_batches(batch)
        tokens = _all_reduce_sum(torch.tensor(float(sum(count_trained_tokens(mb) for mb in micro_batches)),
                                              device=self.device))
        global_tokens = float(tokens.item()) / self.sp_size  # the ranks of an SP group hold the same samples
        nll_total = torch.zeros((), device=self.device)
        # FSDP averages gradients over ranks; scaling by world / global tokens makes the sum a global token mean.
        # Under Ulysses each rank's sum is its share of its group's, and the group's ranks' gradients add up to the
        # group's, so the same scale holds.
        scale = self.world_size / max(global_tokens, 1.0)
        with GradientAccumulation(self.fsdp_model, len(micro_batches)) as accumulation:
            for micro_idx, micro in enumerate(micro_batches):
                nll_sum, _ = sft_nll_sum(self.fsdp_model, micro, self.use_remove_padding, self.ulysses_group)
                accumulation.before_backward(micro_idx)
                (nll_sum * scale).backward()
                nll_total += nll_sum.detach()
        grad_norm = clip_grad_norm_(self.fsdp_model.parameters(), self.config.optim.clip_grad)
        stepped = global_tokens > 0 and math.isfinite(grad_norm)
        if stepped:
            self.optimizer.step()
        elif self.rank == 0:
            why = "no trained tokens in the batch" if global_tokens == 0 else f"grad norm is {grad_norm}"
            print(f"[sft] step {self.global_step}: optimizer step skipped ({why})", file=sys.stderr, flush=True)
        self.optimizer.zero_grad(set_to_none=True)
        lr = self.lr_scheduler.get_last_lr()[0]
        self.lr_scheduler.step()
        loss = float(_all_reduce_sum(nll_total).item()) / max(global_tokens, 1.0)
        return {"train/loss": loss, "train/lr": lr, "train/grad_norm": grad_norm, "train/tokens": global_tokens,
                "train/skipped_step": float(not stepped), "timing_s/step": time.perf_counter() - start}

    def validation_step(self, batch: dict[str, torch.Tensor]) -> tuple[float, float]:
        """(NLL sum, trained tokens) of one validation batch on this rank."""
        self.fsdp_model.eval()
        with torch.no_grad():
            nll, tokens = sft_nll_sum(self.fsdp_model, self._micro_batches(batch)[0], self.use_remove_padding,
                                      self.ulysses_group)
        return float(nll.item()), float(tokens.item())

    def validate(self) -> dict[str, float]:
        totals = torch.zeros(2, device=self.device, dtype=torch.float64)
        for batch in self.val_dataloader:
            nll, tokens = self.validation_step(batch)
            totals += torch.tensor([nll, tokens], device=self.device, dtype=torch.float64)
        totals = _all_reduce_sum(totals)
        return {"val/loss": float(totals[0] / totals[1].clamp(min=1.0))}

    def save_checkpoint(self, step: int) -> str:
        extra = {"epoch": self.epoch, "steps_in_epoch": self.steps_in_epoch,
                 "dataloader": self.train_dataloader.state_dict(), "world_size": self.world_size,
                 "dp_size": self.dp_size}
        path = self.checkpointer.save(self.fsdp_model, hf_module(self.fsdp_model), self.optimizer, self.lr_scheduler,
                                      extra, step, lora_scaling=self.lora_scaling)
        self.last_checkpoint = path
        if self.rank == 0:
            print(f"[sft] saved {path}", flush=True)
        return path

    # -- the loop -------------------------------------------------------------------------------------------------

    def _is_due(self, freq: int, is_last: bool) -> bool:
        return is_last or (freq > 0 and self.global_step % freq == 0)

    def fit(self, tracker=None) -> dict[str, float]:
        """Train to trainer.total_training_steps (or total_epochs); validate and save at test_freq / save_freq
        and always at the last step. Returns the last step's metrics."""
        from verl.trainer.progress import TrainingProgress

        trainer = self.config.trainer
        metrics: dict[str, float] = {}
        if self.global_step >= self.total_steps:
            if self.rank == 0:
                print(f"[sft] nothing to do: already at step {self.global_step} of {self.total_steps}", flush=True)
            return metrics
        if tracker is not None and hasattr(tracker, "start_run"):
            tracker.start_run(self.global_step)
        progress = TrainingProgress(self.total_steps, initial=self.global_step) if self.rank == 0 else None
        while self.global_step < self.total_steps:
            self.train_sampler.set_epoch(self.epoch)
            if self._pending_loader_state is not None:
                self._position_loader(self._pending_loader_state)
                self._pending_loader_state = None
            finished_epoch = True
            for batch in self.train_dataloader:
                self.global_step += 1
                self.steps_in_epoch += 1
                metrics = self.training_step(batch)
                metrics["train/epoch"] = self.epoch
                is_last = self.global_step >= self.total_steps
                if self.val_dataloader is not None and self._is_due(trainer.test_freq, is_last):
                    metrics.update(self.validate())
                if tracker is not None:
                    tracker.log(data=metrics, step=self.global_step)
                if self._is_due(trainer.save_freq, is_last):
                    self.save_checkpoint(self.global_step)
                if progress is not None:
                    progress.advance(f"loss={metrics['train/loss']:.4g}")
                if is_last:
                    finished_epoch = self.steps_in_epoch >= self.steps_per_epoch
                    break
            if finished_epoch:
                self.epoch, self.steps_in_epoch = self.epoch + 1, 0
        if progress is not None:
            progress.close()
        return metrics


# ---- entry --------------------------------------------------------------------------------------------------------


def init_distributed() -> tuple[int, int]:
    """Join torchrun's (or a Ray worker group's) process group from the environment, or make a one-rank group."""
    if not dist.is_initialized():
        if "RANK" not in os.environ:
            from verl.single_controller.base.worker import Worker

            os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=str(Worker._get_free_port()))
        if get_device_name() == "cuda":
            get_torch_device().set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=get_nccl_backend())
    return dist.get_rank(), dist.get_world_size()


def create_ulysses_device_mesh(world: int, sp: int):
    """Upstream's ("dp", "sp") mesh: sp consecutive ranks per sequence-parallel group (the PPO workers' layout)."""
    from torch.distributed.device_mesh import init_device_mesh

    if world % sp:
        raise ValueError(f"ulysses_sequence_parallel_size={sp} must divide the {world} ranks")
    return init_device_mesh(get_device_name(), (world // sp, sp), mesh_dim_names=("dp", "sp"))


def _tracker(config: SFTTrainerConfig, report_dir: str):
    from verl.trainer.tracking import Tracking

    backends = list(dict.fromkeys([*config.trainer.logger, "jsonl"]))  # the jsonl file is the run report
    return Tracking(project_name=config.trainer.project_name, experiment_name=config.trainer.experiment_name,
                    default_backend=backends, config=config.to_dict(), log_dir=report_dir)


def create_trainer(config: SFTTrainerConfig) -> FSDPSFTTrainer:
    """Join (or make) the process group, load tokenizer and data, and build the trainer for this rank."""
    from verl.models.loader import load_tokenizer
    from verl.models.processor import load_processor
    from verl.trainer.resolved_defaults import log_defaults, resolve_sft_defaults

    set_device_preference(config.trainer.device)
    rank, world = init_distributed()
    defaults = resolve_sft_defaults(config)  # every rank fills in the same dtype; one logs it
    if rank == 0:
        log_defaults(defaults)
    torch.manual_seed(config.trainer.seed)
    mesh = create_device_mesh(world, config.model.fsdp_config.fsdp_size)
    sp = config.ulysses_sequence_parallel_size
    ulysses_mesh = create_ulysses_device_mesh(world, sp) if sp > 1 else None
    tokenizer = load_tokenizer(base_model_path(config), "model.partial_pretrain",
                               trust_remote_code=config.model.trust_remote_code)
    # upstream's hf_processor: None for a text-only folder; a vision-language folder's renders image rows
    processor = load_processor(base_model_path(config), tokenizer, "model.partial_pretrain",
                               trust_remote_code=config.model.trust_remote_code)
    data = config.data
    train_dataset = create_sft_dataset(data.train_files, data, tokenizer, processor,
                                       max_samples=data.train_max_samples)
    val_dataset = create_sft_dataset(data.val_files, data, tokenizer, processor, max_samples=data.val_max_samples) \
        if data.val_files else None
    return FSDPSFTTrainer(config, mesh, ulysses_mesh, tokenizer, train_dataset, val_dataset, processor=processor)


def run_sft(config: SFTTrainerConfig) -> dict[str, Any]:
    """Train on this process's rank; returns the run summary (written to trainer.report_dir on rank 0)."""
    start = time.time()
    trainer = create_trainer(config)
    report_dir = os.path.abspath(os.path.expanduser(config.trainer.report_dir))
    tracker = _tracker(config, report_dir) if trainer.rank == 0 else None
    report: dict[str, Any] = {}
    try:
        final = trainer.fit(tracker)
        if tracker is not None:  # the report's plots go to the trackers too, so they must be written before finish()
            report = write_run_report(os.path.join(report_dir, "metrics.jsonl"), report_dir)
            tracker.log_artifacts([os.path.join(report_dir, f) for f in report["files"] if f.endswith(".png")])
    finally:
        if tracker is not None:
            tracker.finish()
    summary = {**report, "global_step": trainer.global_step, "world_size": trainer.world_size,
               "model": base_model_path(config), "checkpoint": trainer.last_checkpoint,
               "wall_time_s": round(time.time() - start, 1),
               **{k: v for k, v in final.items() if k in ("train/loss", "val/loss")}}
    if trainer.rank == 0:
        os.makedirs(report_dir, exist_ok=True)
        with open(os.path.join(report_dir, "summary.json"), "w") as f:
            json.dump(summary, f, indent=2)
    return summary
