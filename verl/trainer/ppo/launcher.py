"""From a validated config to a finished run: Ray, tokenizer, data, rewards, roles -> pools, fit, report."""

from __future__ import annotations

import json
import os
import sys
import time

from omegaconf import DictConfig, OmegaConf, open_dict


def _run_dir(config: DictConfig) -> str:
    return os.path.abspath(os.path.expanduser(str(config.trainer.default_local_dir)))


def _report_dir(config: DictConfig) -> str:
    return os.path.abspath(os.path.expanduser(str(config.trainer.get("report_dir") or
                                                  os.path.join(_run_dir(config), "report"))))


def resolve_model_paths(config: DictConfig) -> None:
    """Fill `model.path: null` with the bundled default model, once, so every role loads the same folder."""
    from verl.models.loader import resolve_model_path

    with open_dict(config):
        model = config.actor_rollout_ref.model
        model.path = resolve_model_path(model.get("path"), "actor_rollout_ref.model.path")
        critic_model = config.critic.model
        if not critic_model.get("path"):
            critic_model.path = model.path
        if not critic_model.get("tokenizer_path"):
            critic_model.tokenizer_path = model.path


def role_worker_mapping(config: DictConfig):
    from verl.single_controller.ray import ResourcePoolManager
    from verl.single_controller.roles import Role
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

    mapping = {Role.ActorRollout: ActorRolloutRefWorker, Role.Critic: CriticWorker, Role.RefPolicy: ActorRolloutRefWorker}
    pool = "global_pool"
    spec = {pool: [int(config.trainer.n_gpus_per_node)] * int(config.trainer.nnodes)}
    manager = ResourcePoolManager(resource_pool_spec=spec, mapping={role: pool for role in mapping})
    return mapping, manager


def build_trainer(config: DictConfig):
    """Everything fit() needs, with Ray started; returns (trainer, tracker, report_dir). Workers not yet built."""
    from verl.data.rl_dataset import collate_fn
    from verl.data.rl_loading import create_rl_dataset, create_rl_sampler
    from verl.models.loader import load_tokenizer
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.trainer.tracking import Tracking
    from verl.utils.ray_utils import init_ray

    resolve_model_paths(config)
    run_dir = _run_dir(config)
    report_dir = _report_dir(config)
    os.makedirs(report_dir, exist_ok=True)
    data = config.data
    tokenizer = load_tokenizer(data.get("tokenizer") or config.actor_rollout_ref.model.path, "data.tokenizer",
                               custom_chat_template=config.actor_rollout_ref.model.get("custom_chat_template"))
    train_dataset = create_rl_dataset(data.train_files, data, tokenizer, max_samples=int(data.get("train_max_samples", -1)))
    val_dataset = None
    if data.get("val_files"):
        val_dataset = create_rl_dataset(data.val_files, data, tokenizer, is_train=False,
                                        max_samples=int(data.get("val_max_samples", -1)))
    reward_kwargs = dict(config.reward_model.get("reward_kwargs") or {})
    reward_fn = load_reward_manager(config, tokenizer, num_examine=0, **reward_kwargs)
    val_reward_fn = load_reward_manager(config, tokenizer, num_examine=1, **reward_kwargs)
    workers = int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes)
    init_ray(config.get("ray_kwargs"), run_dir=run_dir, num_cpus=max(workers + 1, os.cpu_count() or 1))
    mapping, pools = role_worker_mapping(config)
    backends = config.trainer.logger
    backends = [backends] if isinstance(backends, str) else list(backends)
    tracker = Tracking(project_name=config.trainer.project_name, experiment_name=config.trainer.experiment_name,
                       default_backend=backends + ["jsonl"], config=OmegaConf.to_container(config, resolve=True),
                       log_dir=report_dir)
    trainer = RayPPOTrainer(config, tokenizer, mapping, pools, reward_fn=reward_fn, val_reward_fn=val_reward_fn,
                            train_dataset=train_dataset, val_dataset=val_dataset, collate_fn=collate_fn,
                            train_sampler=create_rl_sampler(data, train_dataset), tracker=tracker)
    return trainer, tracker, report_dir


def run_training(config: DictConfig) -> dict:
    """Train as configured; returns the run summary (also written to the report folder)."""
    from verl.trainer.learning_curve import print_learning_curve
    from verl.trainer.run_report import write_run_report

    start = time.time()
    trainer, tracker, report_dir = build_trainer(config)
    trainer.init_workers()
    try:
        trainer.fit()
    finally:
        tracker.finish()
    metrics_file = os.path.join(report_dir, "metrics.jsonl")
    summary = write_run_report(metrics_file, report_dir)
    print_learning_curve(metrics_file)
    summary["wall_time_s"] = round(time.time() - start, 1)
    with open(os.path.join(report_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    print(f"run report: {report_dir} (wall time {summary['wall_time_s']:.0f}s)", file=sys.stderr)
    return summary
