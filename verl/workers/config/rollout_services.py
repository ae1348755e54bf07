"""Two sections of `actor_rollout_ref.rollout` that serve the rollout engine rather than shape its samples: upstream's
PrometheusConfig (`rollout.prometheus`: the vLLM engines' metrics for a Prometheus server) and
CheckpointEngineConfig (`rollout.checkpoint_engine`: how the trainer's weights reach the engines).

What each key does here: verl.workers.rollout.prometheus (the metrics endpoints and the scrape-config file) and
verl.workers.sharding_manager.fsdp_vllm (the weight sync in buckets). The pre-Ray checks that need other keys
(rollout.name, disable_log_stats) are verl.trainer.config.rollout_service_checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verl.base_config import BaseConfig
from verl.utils.config_schema import Refusal, at_least, choice, dict_field, refused, refused_values

__all__ = ["CHECKPOINT_ENGINE_BACKENDS", "CheckpointEngineConfig", "PrometheusConfig"]


@dataclass
class PrometheusConfig(BaseConfig):
    """``enable``: every vLLM rollout engine's metrics (vLLM's own ``vllm:*`` counters, gauges and histograms) are
    served in Prometheus' text format at ``http://<node address>:<free port>/metrics`` from the worker that holds
    the engine, and ``file`` is (re)written as a Prometheus configuration scraping those endpoints; then
    ``POST http://<node address>:<port>/-/reload`` asks a running Prometheus server to read it (best effort, as
    upstream). ``port`` is that Prometheus server's port, not the endpoints'. ``served_model_name``: the
    ``model_name`` label of the metrics (its last path part); null: the model path, vLLM's default."""

    enable: bool = False
    port: int = at_least(9090, 1)
    file: str = "/tmp/ray/session_latest/metrics/prometheus/prometheus.yml"
    served_model_name: str | None = None


_DISAGGREGATED = (
    "moves the weights from the trainer's GPUs to rollout replicas on other GPUs or nodes (upstream's standalone or "
    "fully-async rollout); the rollout engines here live in the trainer's own processes, colocated with the actor, "
    "and take the weights in memory"
)
# upstream's backends, and the hardware / library each needs that this build has no use for
CHECKPOINT_ENGINE_BACKENDS: dict[str, str] = {
    "naive": "",
    "nccl": "NCCL broadcasts between NVIDIA GPUs of separate trainer and rollout pools",
    "hccl": "HCCL on Ascend NPUs",
    "nixl": "NVIDIA's NIXL library over RDMA network cards (GPU-direct transfers)",
    "mooncake": "the Mooncake transfer engine over RDMA network cards",
    "kimi_ckpt_engine": "Moonshot's checkpoint-engine library on NVIDIA GPUs",
}


def _backend_refusal(name: str, needs: str) -> Refusal:
    return Refusal(f"the {name} checkpoint engine {_DISAGGREGATED}; it needs {needs}",
                   "Set actor_rollout_ref.rollout.checkpoint_engine.backend=naive (the colocated engine, upstream's "
                   "default).")


@dataclass
class CheckpointEngineConfig(BaseConfig):
    """``backend``: naive (upstream's default) is the colocated hand-over this build runs: the FSDP shards are
    gathered and streamed into the in-process vLLM engine. ``update_weights_bucket_megabytes``: the sync gathers the
    weights in buckets of at most this many MB (a weight larger than that is a bucket of its own); a bucket's
    all-gathers are issued together and its tensors then handed to the engine one by one, so the full weights held
    outside the engine never exceed one bucket. ``engine_kwargs``: per-backend options keyed by backend name; the
    naive engine has none."""

    backend: str = refused_values(
        choice("naive", tuple(CHECKPOINT_ENGINE_BACKENDS)),
        {name: _backend_refusal(name, needs) for name, needs in CHECKPOINT_ENGINE_BACKENDS.items() if needs},
    )
    update_weights_bucket_megabytes: int = at_least(2048, 1)
    engine_kwargs: dict[str, Any] = dict_field()
    custom_backend_module: str | None = refused(
        None,
        "custom checkpoint-engine backends register themselves in upstream's CheckpointEngineRegistry to move "
        "weights to rollout replicas outside the trainer; there is no such registry here: the weights always go "
        "to the colocated in-process engine",
        "Remove actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module.",
    )
