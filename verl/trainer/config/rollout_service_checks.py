"""Pre-Ray checks of `rollout.prometheus` and `rollout.checkpoint_engine` that depend on other keys (the field
markers in verl.workers.config.rollout_services refuse what is wrong on its own).

- `prometheus.enable=true` needs `rollout.name=vllm` (the metrics are vLLM's; the HF rollout has none) and
  `disable_log_stats=false` (vLLM records no metrics otherwise; upstream raises the same). With `enable=false` its
  other keys change nothing, as upstream: a note says so.
- `checkpoint_engine.engine_kwargs`: keyed by backend name; the naive engine has no options; entries for another
  (refused) backend are unused, with a note. `update_weights_bucket_megabytes` with `rollout.name=hf` changes
  nothing (the HF rollout generates with the actor's own module, no weights move): a note.
"""

from __future__ import annotations

import warnings

from verl.trainer.config.ppo_trainer import PPOTrainerConfig
from verl.utils.config_errors import ConfigWarning
from verl.workers.config.rollout_services import CHECKPOINT_ENGINE_BACKENDS, CheckpointEngineConfig, PrometheusConfig

__all__ = ["check_rollout_services"]

R = "actor_rollout_ref.rollout"


def check_rollout_services(cfg: PPOTrainerConfig) -> list[str]:
    rollout = cfg.actor_rollout_ref.rollout
    return _prometheus_problems(rollout) + _checkpoint_engine_problems(rollout)


def _prometheus_problems(rollout) -> list[str]:
    prom = rollout.prometheus
    if not prom.enable:
        default = PrometheusConfig()
        changed = [f"{R}.prometheus.{k}" for k in ("port", "file", "served_model_name")
                   if getattr(prom, k) != getattr(default, k)]
        if changed:
            _note(f"{', '.join(changed)}: {R}.prometheus.enable=false, so no metrics are served and no Prometheus "
                  "configuration is written (as upstream); set prometheus.enable=true to use them.")
        return []
    problems = []
    if rollout.name != "vllm":
        problems.append(f"{R}.prometheus.enable=true needs {R}.name=vllm: the metrics served are the vLLM engine's "
                        f"(vllm:* counters); the {rollout.name} rollout has none. Use {R}.name=vllm, or set "
                        "prometheus.enable=false.")
    if rollout.disable_log_stats:
        problems.append(f"{R}.prometheus.enable=true needs {R}.disable_log_stats=false (as upstream): with "
                        "disable_log_stats=true vLLM records no metrics to serve.")
    return problems


def _checkpoint_engine_problems(rollout) -> list[str]:
    engine = rollout.checkpoint_engine
    key = f"{R}.checkpoint_engine"
    problems = []
    for name, options in engine.engine_kwargs.items():
        if name not in CHECKPOINT_ENGINE_BACKENDS:
            problems.append(f"{key}.engine_kwargs.{name}: not a checkpoint-engine backend; the entries are keyed by "
                            f"backend name ({', '.join(CHECKPOINT_ENGINE_BACKENDS)}).")
        elif name == engine.backend and options:
            problems.append(f"{key}.engine_kwargs.{name}={dict(options)}: the naive (colocated) checkpoint engine "
                            f"takes no options. Remove {key}.engine_kwargs.{name}.")
        elif name != engine.backend and options:
            _note(f"{key}.engine_kwargs.{name}: options of the {name} backend, unused with {key}.backend="
                  f"{engine.backend} (as upstream, only the selected backend's entry is read).")
    default_mb = CheckpointEngineConfig().update_weights_bucket_megabytes
    if rollout.name == "hf" and engine.update_weights_bucket_megabytes != default_mb:
        _note(f"{key}.update_weights_bucket_megabytes={engine.update_weights_bucket_megabytes}: the hf rollout "
              "generates with the actor's own module, so no weights are handed over; it sizes the vLLM sync.")
    return problems


def _note(message: str) -> None:
    warnings.warn(message, ConfigWarning, stacklevel=4)
