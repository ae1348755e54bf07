"""The `trainer` and `ray_kwargs` sections: the run's length, resources, logging and checkpoints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.utils.config_schema import (
    MutableConfig,
    Refusal,
    at_least,
    choice,
    dict_field,
    list_field,
    refused,
    refused_values,
)

RESUME_MODES = ("auto", "disable", "resume_path")
DEVICES = ("auto", "cpu", "cuda")
CONSOLE_FORMATS = ("compact", "full")  # verl.trainer.console_table.CONSOLE_FORMATS, kept equal by a test
# Everything upstream's Tracking knows; whether a backend is installed is checked when it starts.
LOGGERS = ("console", "tensorboard", "wandb", "mlflow", "swanlab", "vemlp_wandb", "clearml", "file")


LEGACY_WORKER_IMPL = ("auto", "enable", "disable")
# upstream's trainer.v1.trainer_mode values; only sync is this build's loop
V1_TRAINER_MODES = ("sync", "colocate_async", "separate_async")

_V1_WHY = ("upstream's v1 trainer modes colocate_async / separate_async and its replay-buffer sampler train "
           "off-policy: the rollout runs ahead of the update, trajectories wait in a TransferQueue-backed replay "
           "buffer and are sampled while at most max_off_policy_threshold model versions old; this build has one "
           "trainer loop, synchronous and colocated (generate, then update, each step), with no replay buffer")
_V1_REFUSAL = (_V1_WHY, "Leave every trainer.v1 key at its default (trainer_mode=sync); steps here are on-policy.")


@dataclass
class V1ColocateAsyncConfig(MutableConfig):
    """`trainer.v1.colocate_async`: batches generated ahead before the first update (refused unless default)."""

    num_warmup_batches: int = refused(1, *_V1_REFUSAL)


@dataclass
class V1SeparateAsyncConfig(MutableConfig):
    """`trainer.v1.separate_async`: rollout on GPUs of its own, weights synced every parameter_sync_step steps."""

    num_warmup_batches: int = refused(1, *_V1_REFUSAL)
    parameter_sync_step: int = refused(4, *_V1_REFUSAL)


@dataclass
class V1CustomSamplerConfig(MutableConfig):
    """`trainer.v1.sampler.custom_sampler`: a replay-buffer sampler class loaded from a file (refused)."""

    path: str | None = refused(None, *_V1_REFUSAL)
    name: str | None = refused(None, *_V1_REFUSAL)


@dataclass
class V1SamplerConfig(MutableConfig):
    """`trainer.v1.sampler`: how upstream's replay buffer picks trajectories and drops stale ones (refused)."""

    max_off_policy_threshold: int = refused(8, *_V1_REFUSAL)  # model versions a trajectory may span
    max_off_policy_strategy: str = refused("drop", *_V1_REFUSAL)  # drop | wait
    sync_refill_failed_groups: bool = refused(False, *_V1_REFUSAL)
    custom_sampler: V1CustomSamplerConfig = field(default_factory=V1CustomSamplerConfig)
    sampler_kwargs: dict[str, Any] = refused(dict_field({}), *_V1_REFUSAL)


@dataclass
class TrainerV1Config(MutableConfig):
    """`trainer.v1` (upstream after v0.7): the v1 trainer's mode and its off-policy machinery. trainer_mode=sync is
    this build's trainer; everything else is refused unless at its default (_V1_WHY)."""

    trainer_mode: str = refused_values(
        choice("sync", V1_TRAINER_MODES),
        {mode: Refusal(_V1_WHY, "Set trainer.v1.trainer_mode=sync (or remove it).")
         for mode in ("colocate_async", "separate_async")},
    )
    sync: dict[str, Any] = refused(dict_field({}), *_V1_REFUSAL)  # upstream: no options (PPOTrainerSync)
    colocate_async: V1ColocateAsyncConfig = field(default_factory=V1ColocateAsyncConfig)
    separate_async: V1SeparateAsyncConfig = field(default_factory=V1SeparateAsyncConfig)
    sampler: V1SamplerConfig = field(default_factory=V1SamplerConfig)


@dataclass
class TrainerConfig(MutableConfig):
    balance_batch: bool = True
    total_epochs: int = at_least(30, 1)
    total_training_steps: int | None = at_least(None, 1)
    # older upstream's spelling of global_profiler.steps (with nsys): run as that (verl.trainer.config.deprecated)
    profile_steps: list[int] | None = None
    project_name: str = "verl_examples"
    experiment_name: str = "gsm8k"
    logger: list[str] = refused_values(
        list_field(["console"], LOGGERS),
        {
            name: Refusal(
                f"the {name} backend is not built (verl.trainer.tracking has console, tensorboard, wandb, mlflow, "
                "swanlab and file)",
                "Use trainer.logger=[console,tensorboard] or another built backend.",
            )
            for name in ("vemlp_wandb", "clearml")
        },
    )
    # Ours (upstream has no such key): what trainer.logger=console prints per step. compact: one aligned row
    # (verl.trainer.console_table); full: upstream's line of every numeric metric.
    console_format: str = choice("compact", CONSOLE_FORMATS)
    log_val_generations: int = at_least(0, 0)
    rollout_data_dir: str | None = None
    validation_data_dir: str | None = None
    nnodes: int = at_least(1, 1)
    n_gpus_per_node: int = at_least(2, 1)  # on a CPU-only machine: worker processes per node
    save_freq: int = -1
    esi_redundant_time: int = refused(
        0, "saving ahead of an expiring ESI (elastic) instance is not built", "Remove it; use trainer.save_freq."
    )
    resume_mode: str = choice("auto", RESUME_MODES)
    resume_from_path: str | None = None
    val_before_train: bool = True
    val_only: bool = False
    test_freq: int = -1
    critic_warmup: int = at_least(0, 0)
    default_hdfs_dir: str | None = refused(
        None, "copying checkpoints to HDFS is not built", "Remove it; checkpoints stay in trainer.default_local_dir."
    )
    del_local_ckpt_after_load: bool = refused(
        False,
        "with no HDFS copy the local checkpoint is the only one, so it is never deleted",
        "Set it to false.",
    )
    default_local_dir: str = "checkpoints/verl_examples/gsm8k"
    max_actor_ckpt_to_keep: int | None = at_least(None, 1)
    max_critic_ckpt_to_keep: int | None = at_least(None, 1)
    # Deadlines on the driver's waits for worker groups (verl.single_controller.base.deadlines): seconds for the
    # workers' start-up (__init__ and init_model: model loading); a call's deadline is worker_call_timeout_s plus
    # worker_call_timeout_per_sample_s per row of its batch. null: no deadline.
    ray_wait_register_center_timeout: int | None = at_least(300, 1)
    worker_call_timeout_s: float | None = at_least(1800.0, 1.0)
    worker_call_timeout_per_sample_s: float = at_least(30.0, 0.0)
    device: str = choice("auto", DEVICES)
    report_dir: str = "checkpoints/verl_examples/gsm8k/report"
    # upstream picks its legacy fsdp_workers (enable) or its engine-based workers (disable); one worker
    # implementation exists here (verl.workers.fsdp_workers) and every value runs it (a note for disable)
    use_legacy_worker_impl: str = choice("auto", LEGACY_WORKER_IMPL)
    # upstream after v0.7 picks its v1 trainer loop (true) or the older RayPPOTrainer (false); this build has one
    # trainer (synchronous, colocated), which runs for either value (a note for false)
    use_v1: bool = True
    v1: TrainerV1Config = field(default_factory=TrainerV1Config)


_TQ_WHY = ("upstream's TransferQueue data plane (the transferqueue package's controller and storage units, and the "
           "trainer and workers that read and write batch fields through it) is not built: batches travel as "
           "DataProto through the worker-group calls")
_TQ_BACKEND_REFUSAL = (
    f"it sizes or picks the storage of upstream's TransferQueue ({_TQ_WHY}), so nothing here would read it",
    "Leave every transfer_queue.backend key at its default (storage_backend=SimpleStorage).",
)


@dataclass
class SimpleStorageConfig(MutableConfig):
    """`transfer_queue.backend.SimpleStorage`: upstream's ZeroMQ storage units (refused unless at the defaults)."""

    total_storage_size: int = refused(100000, *_TQ_BACKEND_REFUSAL)  # samples held at most
    num_data_storage_units: int = refused(8, *_TQ_BACKEND_REFUSAL)  # storage Ray actors


@dataclass
class MooncakeStoreConfig(MutableConfig):
    """`transfer_queue.backend.MooncakeStore`: TransferQueue's Mooncake distributed KV-store backend (its metadata
    and master servers, this host's segment and buffer, tcp or rdma transport). Refused unless at the defaults."""

    auto_init: bool = refused(False, *_TQ_BACKEND_REFUSAL)  # start the Mooncake servers itself
    metadata_server: str = refused("localhost:50123", *_TQ_BACKEND_REFUSAL)
    master_server_address: str = refused("localhost:50124", *_TQ_BACKEND_REFUSAL)
    local_hostname: str = refused("localhost", *_TQ_BACKEND_REFUSAL)
    protocol: str = refused("tcp", *_TQ_BACKEND_REFUSAL)
    global_segment_size: int = refused(4294967296, *_TQ_BACKEND_REFUSAL)  # bytes this host lends the store
    local_buffer_size: int = refused(1073741824, *_TQ_BACKEND_REFUSAL)
    device_name: str = refused("", *_TQ_BACKEND_REFUSAL)  # the RDMA device


@dataclass
class TransferQueueBackendConfig(MutableConfig):
    """`transfer_queue.backend` (upstream after v0.7): TransferQueue's pluggable storage and its options."""

    storage_backend: str = refused("SimpleStorage", *_TQ_BACKEND_REFUSAL)
    SimpleStorage: SimpleStorageConfig = field(default_factory=SimpleStorageConfig)  # noqa: N815 (upstream's key)
    MooncakeStore: MooncakeStoreConfig = field(default_factory=MooncakeStoreConfig)  # noqa: N815 (upstream's key)


_TQ_METRICS_REFUSAL = (
    f"it serves metrics of upstream's TransferQueue controller and storage ({_TQ_WHY}), so there is nothing to serve",
    "Leave transfer_queue.metrics at its defaults (enabled=false, port=0); the trainer's own metrics go to "
    "trainer.logger.",
)


@dataclass
class TransferQueueMetricsConfig(MutableConfig):
    """`transfer_queue.metrics` (upstream after v0.7): TransferQueue's metrics endpoint. Refused unless default."""

    enabled: bool = refused(False, *_TQ_METRICS_REFUSAL)
    port: int = refused(0, *_TQ_METRICS_REFUSAL)  # 0: a free port


@dataclass
class TransferQueueConfig(MutableConfig):
    """`transfer_queue` (upstream v0.7): its TransferQueue data system streams the batch's fields between the
    trainer and the workers through storage Ray actors (the `transferqueue` package, `tq.init`)."""

    enable: bool = refused(False, _TQ_WHY, "Remove it (or set transfer_queue.enable=false).")
    metrics: TransferQueueMetricsConfig = field(default_factory=TransferQueueMetricsConfig)
    backend: TransferQueueBackendConfig = field(default_factory=TransferQueueBackendConfig)


@dataclass
class RayKwargsConfig(MutableConfig):
    # Passed to ray.init as keyword arguments, so any ray.init argument is accepted.
    ray_init: dict[str, Any] = dict_field({"num_cpus": None, "object_store_memory": None, "include_dashboard": False})
    timeline_json_file: str | None = refused(
        None, "writing a Ray timeline is not built", "Remove it; `ray timeline` dumps one from a running cluster."
    )
